#include "tensor/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "base/error.h"
#include "tensor/cpu/kernels.h"
#include "tensor/packed_sampling_params.h"
#include "tensor/sample_packed.h"
#include "tensor/upload.h"

#ifdef OMNI_HAVE_CUDA
#include "tensor/cuda/device.h"
#include "tensor/cuda/image_kernels.h"
#include "tensor/cuda/kernels.h"
// Runs cpu::call or cuda::call by the device the arguments were validated on.
#define OMNI_DISPATCH(device, call) ((device).type == DeviceType::kCpu ? cpu::call : cuda::call)
#else
#define OMNI_DISPATCH(device, call) ((void)(device), cpu::call)
#endif

namespace omni::tensor::ops {
namespace {

struct Arg {
  const char* name;
  const Tensor* tensor;
};

// Checks what every op needs: defined, contiguous tensors on one device. Returns that device.
Device common_device(const char* op, std::initializer_list<Arg> args) {
  const Device device = args.begin()->tensor->device();
  for (const Arg& a : args) {
    if (!a.tensor->defined()) throw_error(ErrorCode::kInvalidArgument, "{}: {} is not defined", op, a.name);
    if (!a.tensor->is_contiguous()) throw_error(ErrorCode::kInvalidArgument, "{}: {} is not contiguous", op, a.name);
    if (a.tensor->device() != device) {
      throw_error(ErrorCode::kInvalidArgument, "{}: {} is on {} but {} is on {}", op, a.name,
                  device_name(a.tensor->device()), args.begin()->name, device_name(device));
    }
  }
#ifndef OMNI_HAVE_CUDA
  if (device.type != DeviceType::kCpu) {
    throw_error(ErrorCode::kUnsupported, "{}: no implementation for {} in this build", op, device_name(device));
  }
#endif
  return device;
}

// The activation dtype of an op: float32 on the CPU; float32, bfloat16 or float16 on CUDA.
void expect_float(const char* op, const char* name, const Tensor& t) {
  const DType d = t.dtype();
  if (t.device().type == DeviceType::kCpu) {
    if (d != DType::kF32) {
      throw_error(ErrorCode::kInvalidArgument, "{}: {} must be float32 on the cpu, got {}", op, name, dtype_name(d));
    }
  } else if (d != DType::kF32 && d != DType::kBF16 && d != DType::kF16) {
    throw_error(ErrorCode::kInvalidArgument, "{}: {} must be float32, bfloat16 or float16 on {}, got {}", op, name,
                device_name(t.device()), dtype_name(d));
  }
}

void expect_dtype(const char* op, const char* name, const Tensor& t, DType dtype) {
  if (t.dtype() != dtype) {
    throw_error(ErrorCode::kInvalidArgument, "{}: {} must be {}, got {}", op, name, dtype_name(dtype),
                dtype_name(t.dtype()));
  }
}

// A floating tensor of the op that must share the dtype of its first one.
void expect_same_dtype(const char* op, const char* name, const Tensor& t, const char* ref_name, const Tensor& ref) {
  if (t.dtype() != ref.dtype()) {
    throw_error(ErrorCode::kInvalidArgument, "{}: {} is {} but {} is {} (one dtype per op)", op, name,
                dtype_name(t.dtype()), ref_name, dtype_name(ref.dtype()));
  }
}

// An int32 index tensor (ids, slots, positions) of an op that runs on `device`: on that device, or on
// the host (validated there by the caller) and then uploaded here without a synchronisation.
Tensor index_tensor(const char* op, const char* name, const Tensor& t, Device device) {
  if (!t.defined()) throw_error(ErrorCode::kInvalidArgument, "{}: {} is not defined", op, name);
  if (!t.is_contiguous()) throw_error(ErrorCode::kInvalidArgument, "{}: {} is not contiguous", op, name);
  expect_dtype(op, name, t, DType::kI32);
  if (t.device() == device) return t;
  if (t.device().type != DeviceType::kCpu) {
    throw_error(ErrorCode::kInvalidArgument, "{}: {} is on {} but the op runs on {} (index tensors may be on the cpu)",
                op, name, device_name(t.device()), device_name(device));
  }
#ifdef OMNI_HAVE_CUDA
  return cuda::upload_ints(t, device.index);
#else
  return t;
#endif
}

void expect_rank(const char* op, const char* name, const Tensor& t, int rank) {
  if (t.rank() != rank) {
    throw_error(ErrorCode::kInvalidArgument, "{}: {} must have rank {}, got shape {}", op, name, rank,
                shape_to_string(t.shape()));
  }
}

void expect_shape(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  if (t.shape() != shape) {
    throw_error(ErrorCode::kInvalidArgument, "{}: {} must have shape {}, got {}", op, name, shape_to_string(shape),
                shape_to_string(t.shape()));
  }
}

void expect_no_alias(const char* op, const char* name, const Tensor& t, const char* out_name, const Tensor& out) {
  const auto* a = static_cast<const char*>(t.raw());
  const auto* b = static_cast<const char*>(out.raw());
  if (a < b + out.nbytes() && b < a + t.nbytes()) {
    throw_error(ErrorCode::kInvalidArgument, "{}: {} must not overlap {}", op, out_name, name);
  }
}

// Host KV slots must each name a slot of the cache [num_blocks, block_size, ...]; device-resident
// ones are checked by the kernel (ops.h).
void check_host_slots(const char* op, const Tensor& slots, const Tensor& k_cache) {
  if (slots.device().type != DeviceType::kCpu) return;
  const int64_t capacity = k_cache.dim(0) * k_cache.dim(1);
  const int32_t* slot = slots.data<int32_t>();
  for (int64_t t = 0; t < slots.numel(); ++t) {
    if (slot[t] < 0 || slot[t] >= capacity) {
      throw_error(ErrorCode::kInvalidArgument, "{}: slot {} of token {} is outside the cache ({} slots)", op, slot[t],
                  t, capacity);
    }
  }
}

// The segments of a packed-streams call (ops.h): each at least `least` rows, summing to the rows of
// x. Returns them, or {T_in} for an empty span.
std::vector<int64_t> checked_segments(const char* op, std::span<const int64_t> segments, const Tensor& x, int64_t least,
                                      const char* least_what) {
  if (segments.empty()) return {x.dim(0)};
  int64_t sum = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    if (segments[s] < least) {
      throw_error(ErrorCode::kInvalidArgument, "{}: segment {} has {} rows, fewer than the {} {}", op, s, segments[s],
                  least, least_what);
    }
    sum += segments[s];
  }
  if (sum != x.dim(0)) {
    throw_error(ErrorCode::kInvalidArgument, "{}: the segments sum to {} rows but x has {}", op, sum, x.dim(0));
  }
  return {segments.begin(), segments.end()};
}

}  // namespace

void upload(const Tensor& host, Tensor& dst) {
  const char* op = "upload";
  common_device(op, {{"host", &host}});
  common_device(op, {{"dst", &dst}});
  if (host.device().type != DeviceType::kCpu) {
    throw_error(ErrorCode::kInvalidArgument, "upload: host is on {}, not the cpu", device_name(host.device()));
  }
  expect_same_dtype(op, "dst", dst, "host", host);
  expect_shape(op, "dst", dst, host.shape());
  if (dst.device().type == DeviceType::kCpu) {
    std::memcpy(dst.raw(), host.raw(), host.nbytes());
    return;
  }
#ifdef OMNI_HAVE_CUDA
  cuda::upload_async(dst.raw(), host.raw(), host.nbytes(), dst.device().index);
#endif
}

void embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  const char* op = "embedding";
  const Device device = common_device(op, {{"table", &table}, {"out", &out}});
  expect_float(op, "table", table);
  expect_dtype(op, "ids", ids, DType::kI32);
  expect_rank(op, "table", table, 2);
  expect_rank(op, "ids", ids, 1);
  expect_shape(op, "out", out, {ids.dim(0), table.dim(1)});
  expect_same_dtype(op, "out", out, "table", table);
  if (ids.device().type == DeviceType::kCpu) {
    const int32_t* id = ids.data<int32_t>();
    for (int64_t t = 0; t < ids.numel(); ++t) {
      if (id[t] < 0 || id[t] >= table.dim(0)) {
        throw_error(ErrorCode::kInvalidArgument, "embedding: token id {} at index {} is outside the vocabulary [0, {})",
                    id[t], t, table.dim(0));
      }
    }
  }
  const Tensor ids_here = index_tensor(op, "ids", ids, device);
  OMNI_DISPATCH(device, embedding(table, ids_here, out));
}

void gather_weighted_sum(const Tensor& src, const Tensor& index, const Tensor& weights, Tensor& out) {
  const char* op = "gather_weighted_sum";
  const Device device = common_device(op, {{"src", &src}, {"weights", &weights}, {"out", &out}});
  expect_float(op, "src", src);
  expect_rank(op, "src", src, 2);
  expect_dtype(op, "index", index, DType::kI32);
  expect_rank(op, "index", index, 2);
  expect_same_dtype(op, "weights", weights, "src", src);
  expect_shape(op, "weights", weights, index.shape());
  expect_same_dtype(op, "out", out, "src", src);
  expect_shape(op, "out", out, {index.dim(0), src.dim(1)});
  if (index.device().type == DeviceType::kCpu) {
    const int32_t* id = index.data<int32_t>();
    for (int64_t i = 0; i < index.numel(); ++i) {
      if (id[i] < 0 || id[i] >= src.dim(0)) {
        throw_error(ErrorCode::kInvalidArgument, "gather_weighted_sum: index [{}, {}] = {} is outside src's {} rows",
                    i / index.dim(1), i % index.dim(1), id[i], src.dim(0));
      }
    }
  }
  if (out.numel() == 0) return;
  const Tensor index_here = index_tensor(op, "index", index, device);
  OMNI_DISPATCH(device, gather_weighted_sum(src, index_here, weights, out));
}

void substitute_ids(const Tensor& source, const Tensor& rows, Tensor& ids) {
  const char* op = "substitute_ids";
  const Device device = common_device(op, {{"source", &source}, {"ids", &ids}});
  expect_dtype(op, "source", source, DType::kI32);
  expect_dtype(op, "ids", ids, DType::kI32);
  expect_rank(op, "source", source, 1);
  expect_rank(op, "ids", ids, 1);
  if (!rows.defined()) throw_error(ErrorCode::kInvalidArgument, "substitute_ids: rows is not defined");
  expect_shape(op, "rows", rows, {ids.dim(0)});
  if (rows.device().type == DeviceType::kCpu) {
    const int32_t* row = rows.data<int32_t>();
    for (int64_t t = 0; t < rows.numel(); ++t) {
      if (row[t] >= source.dim(0)) {
        throw_error(ErrorCode::kInvalidArgument, "substitute_ids: rows[{}] = {} is past the {} source ids", t, row[t],
                    source.dim(0));
      }
    }
  }
  if (ids.numel() == 0) return;
  const Tensor rows_here = index_tensor(op, "rows", rows, device);
  OMNI_DISPATCH(device, substitute_ids(source, rows_here, ids));
}

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  const char* op = "rms_norm";
  const Device device = common_device(op, {{"x", &x}, {"weight", &weight}, {"out", &out}});
  expect_float(op, "x", x);
  expect_same_dtype(op, "weight", weight, "x", x);
  expect_same_dtype(op, "out", out, "x", x);
  if (x.rank() < 1) throw_error(ErrorCode::kInvalidArgument, "rms_norm: x must have rank >= 1");
  expect_shape(op, "weight", weight, {x.dim(-1)});
  expect_shape(op, "out", out, x.shape());
  OMNI_DISPATCH(device, rms_norm(x, weight, eps, out));
}

void add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& weight, float eps, Tensor& out) {
  const char* op = "add_rms_norm";
  const Device device = common_device(op, {{"x", &x}, {"residual", &residual}, {"weight", &weight}, {"out", &out}});
  expect_float(op, "x", x);
  for (Arg arg : {Arg{"residual", &residual}, Arg{"weight", &weight}, Arg{"out", &out}}) {
    expect_same_dtype(op, arg.name, *arg.tensor, "x", x);
  }
  if (x.rank() < 1) throw_error(ErrorCode::kInvalidArgument, "add_rms_norm: x must have rank >= 1");
  expect_shape(op, "residual", residual, x.shape());
  expect_shape(op, "weight", weight, {x.dim(-1)});
  expect_shape(op, "out", out, x.shape());
  if (out.raw() == residual.raw()) {
    throw_error(ErrorCode::kInvalidArgument, "add_rms_norm: out must not alias residual");
  }
  OMNI_DISPATCH(device, add_rms_norm(x, residual, weight, eps, out));
}

void matmul(const Tensor& a, const Tensor& b, bool transpose_b, Tensor& out) {
  const char* op = "matmul";
  const Device device = common_device(op, {{"a", &a}, {"b", &b}, {"out", &out}});
  expect_float(op, "a", a);
  for (Arg arg : {Arg{"a", &a}, Arg{"b", &b}, Arg{"out", &out}}) {
    expect_same_dtype(op, arg.name, *arg.tensor, "a", a);
    expect_rank(op, arg.name, *arg.tensor, 2);
  }
  const int64_t k = transpose_b ? b.dim(1) : b.dim(0);
  const int64_t n = transpose_b ? b.dim(0) : b.dim(1);
  if (a.dim(1) != k) {
    throw_error(ErrorCode::kInvalidArgument, "matmul: a {} and b {}{} disagree on the inner dimension",
                shape_to_string(a.shape()), shape_to_string(b.shape()), transpose_b ? " (transposed)" : "");
  }
  expect_shape(op, "out", out, {a.dim(0), n});
  OMNI_DISPATCH(device, matmul(a, b, transpose_b, out));
}

void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  const char* op = "linear";
  const Device device = common_device(op, {{"x", &x}, {"w", &w}, {"out", &out}});
  expect_float(op, "x", x);
  for (Arg arg : {Arg{"x", &x}, Arg{"w", &w}, Arg{"out", &out}}) {
    expect_same_dtype(op, arg.name, *arg.tensor, "x", x);
    expect_rank(op, arg.name, *arg.tensor, 2);
  }
  if (x.dim(1) != w.dim(1)) {
    throw_error(ErrorCode::kInvalidArgument, "linear: x {} does not match weight {} (in features {})",
                shape_to_string(x.shape()), shape_to_string(w.shape()), w.dim(1));
  }
  expect_shape(op, "out", out, {x.dim(0), w.dim(0)});
  if (bias.defined()) {
    common_device(op, {{"x", &x}, {"bias", &bias}});
    expect_same_dtype(op, "bias", bias, "x", x);
    expect_shape(op, "bias", bias, {w.dim(0)});
  }
  OMNI_DISPATCH(device, linear(x, w, bias, out));
}

namespace {

// Validates a fused product's weight [N, K] against x's K and its output [M, N].
void expect_product(const char* op, const Tensor& x, int64_t k, const Tensor& w, const char* out_name,
                    const Tensor& out) {
  expect_float(op, "x", x);
  for (Arg arg : {Arg{"x", &x}, Arg{"w", &w}, Arg{out_name, &out}}) {
    expect_same_dtype(op, arg.name, *arg.tensor, "x", x);
    expect_rank(op, arg.name, *arg.tensor, 2);
  }
  if (w.dim(1) != k) {
    throw_error(ErrorCode::kInvalidArgument, "{}: x {} does not match weight {} (in features {})", op,
                shape_to_string(x.shape()), shape_to_string(w.shape()), w.dim(1));
  }
  expect_shape(op, out_name, out, {x.dim(0), w.dim(0)});
  if (out.raw() == x.raw() && out.nbytes() > 0) {
    throw_error(ErrorCode::kInvalidArgument, "{}: {} must not alias x", op, out_name);
  }
}

}  // namespace

bool linear_fuses(const Tensor& x, const Tensor& w, const Tensor& out) {
#ifdef OMNI_HAVE_CUDA
  return x.device().type == DeviceType::kCuda && x.rank() == 2 && x.dim(0) <= kFusedLinearMaxRows &&
         cuda::linear_prefers_gemv(cuda::GemvFusion::kAccumulate, x, w, Tensor(), out);
#else
  (void)x, (void)w, (void)out;
  return false;
#endif
}

void rms_norm_linear(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w, const Tensor& bias,
                     Tensor& out) {
  const char* op = "rms_norm_linear";
  const Device device = common_device(op, {{"x", &x}, {"norm_weight", &norm_weight}, {"w", &w}, {"out", &out}});
  expect_product(op, x, x.rank() == 2 ? x.dim(1) : -1, w, "out", out);
  expect_same_dtype(op, "norm_weight", norm_weight, "x", x);
  expect_shape(op, "norm_weight", norm_weight, {x.dim(1)});
  if (bias.defined()) {
    common_device(op, {{"x", &x}, {"bias", &bias}});
    expect_same_dtype(op, "bias", bias, "x", x);
    expect_shape(op, "bias", bias, {w.dim(0)});
  }
#ifdef OMNI_HAVE_CUDA
  if (device.type == DeviceType::kCuda && x.dim(0) <= kFusedLinearMaxRows &&
      cuda::linear_prefers_gemv(cuda::GemvFusion::kRmsNorm, x, w, norm_weight, out)) {
    return cuda::gemv(cuda::GemvFusion::kRmsNorm, x, w, bias, norm_weight, eps, out);
  }
#endif
  Tensor normed = Tensor::empty(x.shape(), x.dtype(), device);
  rms_norm(x, norm_weight, eps, normed);
  linear(normed, w, bias, out);
}

void linear_add(const Tensor& x, const Tensor& w, Tensor& residual) {
  const char* op = "linear_add";
  const Device device = common_device(op, {{"x", &x}, {"w", &w}, {"residual", &residual}});
  expect_product(op, x, x.rank() == 2 ? x.dim(1) : -1, w, "residual", residual);
#ifdef OMNI_HAVE_CUDA
  if (device.type == DeviceType::kCuda && x.dim(0) <= kFusedLinearMaxRows &&
      cuda::linear_prefers_gemv(cuda::GemvFusion::kAccumulate, x, w, Tensor(), residual)) {
    return cuda::gemv(cuda::GemvFusion::kAccumulate, x, w, Tensor(), Tensor(), 0.0f, residual);
  }
#endif
  Tensor product = Tensor::empty(residual.shape(), residual.dtype(), device);
  linear(x, w, Tensor(), product);
  add(residual, product, residual);
}

void silu_and_mul_linear_add(const Tensor& gate_up, const Tensor& w, Tensor& residual) {
  const char* op = "silu_and_mul_linear_add";
  const Device device = common_device(op, {{"gate_up", &gate_up}, {"w", &w}, {"residual", &residual}});
  expect_rank(op, "gate_up", gate_up, 2);
  if (gate_up.dim(1) % 2 != 0) {
    throw_error(ErrorCode::kInvalidArgument, "silu_and_mul_linear_add: gate_up width {} is odd", gate_up.dim(1));
  }
  expect_product(op, gate_up, gate_up.dim(1) / 2, w, "residual", residual);
#ifdef OMNI_HAVE_CUDA
  if (device.type == DeviceType::kCuda && gate_up.dim(0) <= kFusedLinearMaxRows &&
      cuda::linear_prefers_gemv(cuda::GemvFusion::kSiluAndMulAccumulate, gate_up, w, Tensor(), residual)) {
    return cuda::gemv(cuda::GemvFusion::kSiluAndMulAccumulate, gate_up, w, Tensor(), Tensor(), 0.0f, residual);
  }
#endif
  Tensor act = Tensor::empty({gate_up.dim(0), gate_up.dim(1) / 2}, gate_up.dtype(), device);
  silu_and_mul(gate_up, act);
  linear_add(act, w, residual);
}

void rotary_embedding(Tensor& x, const Tensor& positions, const RopeSpec& spec) {
  const char* op = "rotary_embedding";
  const Device device = common_device(op, {{"x", &x}});
  expect_float(op, "x", x);
  if (positions.defined() && positions.dtype() != DType::kF32) expect_dtype(op, "positions", positions, DType::kI32);
  expect_rank(op, "x", x, 3);
  if (x.dim(2) % 2 != 0) throw_error(ErrorCode::kInvalidArgument, "rotary_embedding: head_dim {} is odd", x.dim(2));
  if (spec.layout == RopeLayout::kNeox) {
    expect_shape(op, "positions", positions, {x.dim(0)});
  } else {
    expect_shape(op, "positions", positions, {3, x.dim(0)});
    const auto& s = spec.mrope_section;
    if (s[0] < 0 || s[1] < 0 || s[2] < 0 || s[0] + s[1] + s[2] > x.dim(2) / 2) {
      throw_error(ErrorCode::kInvalidArgument, "rotary_embedding: mrope_section [{}, {}, {}] does not fit head_dim {}",
                  s[0], s[1], s[2], x.dim(2));
    }
  }
  if (!(spec.theta > 0.0f)) throw_error(ErrorCode::kInvalidArgument, "rotary_embedding: theta must be > 0");
  if (positions.dtype() == DType::kF32) {
    // Float positions (fractional M-RoPE positions) are host values, which both kernels read as
    // they are: on a device, after a copy there.
    if (positions.device().type != DeviceType::kCpu || !positions.is_contiguous()) {
      throw_error(ErrorCode::kInvalidArgument, "rotary_embedding: float positions must be a contiguous host tensor");
    }
    const float* p = positions.data<float>();
    for (int64_t i = 0; i < positions.numel(); ++i) {
      if (!std::isfinite(p[i]))
        throw_error(ErrorCode::kInvalidArgument, "rotary_embedding: position {} is not finite", p[i]);
    }
    const Tensor positions_here = device.type == DeviceType::kCpu ? positions : positions.to(device);
    OMNI_DISPATCH(device, rotary_embedding(x, positions_here, spec));
    return;
  }
  const Tensor positions_here = index_tensor(op, "positions", positions, device);
  OMNI_DISPATCH(device, rotary_embedding(x, positions_here, spec));
}

void qk_norm_rope(Tensor& q, Tensor& k, const Tensor& q_norm, const Tensor& k_norm, float eps, const Tensor& positions,
                  float theta) {
  const char* op = "qk_norm_rope";
  const Device device = common_device(op, {{"q", &q}, {"k", &k}});
  expect_float(op, "q", q);
  expect_same_dtype(op, "k", k, "q", q);
  expect_rank(op, "q", q, 3);
  expect_rank(op, "k", k, 3);
  const int64_t head_dim = q.dim(2);
  if (head_dim % 2 != 0) throw_error(ErrorCode::kInvalidArgument, "qk_norm_rope: head_dim {} is odd", head_dim);
  if (k.dim(0) != q.dim(0) || k.dim(2) != head_dim) {
    throw_error(ErrorCode::kInvalidArgument, "qk_norm_rope: k {} does not match q {} (tokens, head_dim)",
                shape_to_string(k.shape()), shape_to_string(q.shape()));
  }
  if (q_norm.defined() != k_norm.defined()) {
    throw_error(ErrorCode::kInvalidArgument, "qk_norm_rope: q_norm and k_norm must both be given or both be undefined");
  }
  if (q_norm.defined()) {
    common_device(op, {{"q", &q}, {"q_norm", &q_norm}, {"k_norm", &k_norm}});
    expect_same_dtype(op, "q_norm", q_norm, "q", q);
    expect_same_dtype(op, "k_norm", k_norm, "q", q);
    expect_shape(op, "q_norm", q_norm, {head_dim});
    expect_shape(op, "k_norm", k_norm, {head_dim});
  }
  expect_dtype(op, "positions", positions, DType::kI32);
  expect_shape(op, "positions", positions, {q.dim(0)});
  if (!(theta > 0.0f)) throw_error(ErrorCode::kInvalidArgument, "qk_norm_rope: theta must be > 0");
  const Tensor positions_here = index_tensor(op, "positions", positions, device);
  OMNI_DISPATCH(device, qk_norm_rope(q, k, q_norm, k_norm, eps, positions_here, theta));
}

void store_kv(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_cache, Tensor& v_cache) {
  const char* op = "store_kv";
  const Device device = common_device(op, {{"k", &k}, {"v", &v}, {"k_cache", &k_cache}, {"v_cache", &v_cache}});
  expect_rank(op, "k", k, 3);
  expect_rank(op, "k_cache", k_cache, 4);
  expect_float(op, "k", k);
  for (Arg arg : {Arg{"v", &v}, Arg{"k_cache", &k_cache}, Arg{"v_cache", &v_cache}}) {
    expect_same_dtype(op, arg.name, *arg.tensor, "k", k);
  }
  expect_shape(op, "v", v, k.shape());
  expect_shape(op, "v_cache", v_cache, k_cache.shape());
  expect_shape(op, "slots", slots, {k.dim(0)});
  expect_dtype(op, "slots", slots, DType::kI32);
  if (k_cache.dim(2) != k.dim(1) || k_cache.dim(3) != k.dim(2)) {
    throw_error(ErrorCode::kInvalidArgument, "store_kv: k {} does not fit cache {}", shape_to_string(k.shape()),
                shape_to_string(k_cache.shape()));
  }
  check_host_slots(op, slots, k_cache);
  const Tensor slots_here = index_tensor(op, "slots", slots, device);
  OMNI_DISPATCH(device, store_kv(k, v, slots_here, k_cache, v_cache));
}

void qkv_norm_rope_store(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps,
                         const Tensor& positions, float theta, const Tensor& slots, Tensor& q_out, Tensor& k_cache,
                         Tensor& v_cache) {
  const char* op = "qkv_norm_rope_store";
  const Device device =
      common_device(op, {{"qkv", &qkv}, {"q_out", &q_out}, {"k_cache", &k_cache}, {"v_cache", &v_cache}});
  expect_float(op, "qkv", qkv);
  for (Arg arg : {Arg{"q_out", &q_out}, Arg{"k_cache", &k_cache}, Arg{"v_cache", &v_cache}}) {
    expect_same_dtype(op, arg.name, *arg.tensor, "qkv", qkv);
  }
  expect_rank(op, "qkv", qkv, 3);
  expect_rank(op, "q_out", q_out, 3);
  expect_rank(op, "k_cache", k_cache, 4);
  expect_shape(op, "v_cache", v_cache, k_cache.shape());
  const int64_t tokens = qkv.dim(0), head_dim = qkv.dim(2), heads = q_out.dim(1), kv_heads = k_cache.dim(2);
  if (head_dim % 2 != 0) throw_error(ErrorCode::kInvalidArgument, "{}: head_dim {} is odd", op, head_dim);
  if (k_cache.dim(3) != head_dim || qkv.dim(1) != heads + 2 * kv_heads) {
    throw_error(ErrorCode::kInvalidArgument,
                "{}: qkv {} must be [tokens, heads + 2 * kv_heads, head_dim] for q_out {} and cache {}", op,
                shape_to_string(qkv.shape()), shape_to_string(q_out.shape()), shape_to_string(k_cache.shape()));
  }
  expect_shape(op, "q_out", q_out, {tokens, heads, head_dim});
  expect_no_alias(op, "qkv", qkv, "q_out", q_out);
  if (q_norm.defined() != k_norm.defined()) {
    throw_error(ErrorCode::kInvalidArgument, "{}: q_norm and k_norm must both be given or both be undefined", op);
  }
  if (q_norm.defined()) {
    common_device(op, {{"qkv", &qkv}, {"q_norm", &q_norm}, {"k_norm", &k_norm}});
    expect_same_dtype(op, "q_norm", q_norm, "qkv", qkv);
    expect_same_dtype(op, "k_norm", k_norm, "qkv", qkv);
    expect_shape(op, "q_norm", q_norm, {head_dim});
    expect_shape(op, "k_norm", k_norm, {head_dim});
  }
  expect_dtype(op, "positions", positions, DType::kI32);
  expect_shape(op, "positions", positions, {tokens});
  expect_dtype(op, "slots", slots, DType::kI32);
  expect_shape(op, "slots", slots, {tokens});
  if (!(theta > 0.0f)) throw_error(ErrorCode::kInvalidArgument, "{}: theta must be > 0", op);
  check_host_slots(op, slots, k_cache);
  const Tensor positions_here = index_tensor(op, "positions", positions, device);
  const Tensor slots_here = index_tensor(op, "slots", slots, device);
  OMNI_DISPATCH(device, qkv_norm_rope_store(qkv, q_norm, k_norm, eps, positions_here, theta, slots_here, q_out, k_cache,
                                            v_cache));
}

namespace {

// The checks paged_attention and paged_decode_attention share: q, the caches and out. Returns the
// device they are on.
Device check_attention_tensors(const char* op, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                               const Tensor& out) {
  const Device device = common_device(op, {{"q", &q}, {"k_cache", &k_cache}, {"v_cache", &v_cache}, {"out", &out}});
  expect_float(op, "q", q);
  for (Arg arg : {Arg{"k_cache", &k_cache}, Arg{"v_cache", &v_cache}, Arg{"out", &out}}) {
    expect_same_dtype(op, arg.name, *arg.tensor, "q", q);
  }
  expect_rank(op, "q", q, 3);
  expect_rank(op, "k_cache", k_cache, 4);
  expect_shape(op, "v_cache", v_cache, k_cache.shape());
  expect_shape(op, "out", out, q.shape());
  const int64_t heads = q.dim(1);
  const int64_t kv_heads = k_cache.dim(2);
  if (k_cache.dim(3) != q.dim(2)) {
    throw_error(ErrorCode::kInvalidArgument, "{}: q head_dim {} differs from the cache's {}", op, q.dim(2),
                k_cache.dim(3));
  }
  if (kv_heads == 0 || heads % kv_heads != 0) {
    throw_error(ErrorCode::kInvalidArgument, "{}: {} query heads are not a multiple of {} kv heads", op, heads,
                kv_heads);
  }
  return device;
}

}  // namespace

void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, std::span<const PagedSequence> seqs,
                     float scale, int sliding_window, Tensor& out) {
  const char* op = "paged_attention";
  const Device device = check_attention_tensors(op, q, k_cache, v_cache, out);
#ifdef OMNI_HAVE_CUDA
  if (device.type == DeviceType::kCuda && q.dim(2) > cuda::max_attention_head_dim()) {
    throw_error(ErrorCode::kUnsupported, "paged_attention: head_dim {} is over the {} the cuda kernel supports",
                q.dim(2), cuda::max_attention_head_dim());
  }
#endif
  const int64_t block_size = k_cache.dim(1);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const PagedSequence& seq = seqs[s];
    if (seq.query_start < 0 || seq.query_len < 0 || seq.context_len < 0 || seq.query_start + seq.query_len > q.dim(0)) {
      throw_error(ErrorCode::kInvalidArgument, "paged_attention: sequence {} rows [{}, {}) are outside q's {} rows", s,
                  seq.query_start, seq.query_start + seq.query_len, q.dim(0));
    }
    const int64_t needed = (seq.context_len + seq.query_len + block_size - 1) / block_size;
    if (static_cast<int64_t>(seq.block_table.size()) < needed) {
      throw_error(ErrorCode::kInvalidArgument,
                  "paged_attention: sequence {} needs {} blocks for {} tokens, its block table has {}", s, needed,
                  seq.context_len + seq.query_len, seq.block_table.size());
    }
    for (int64_t i = 0; i < needed; ++i) {
      if (seq.block_table[i] < 0 || seq.block_table[i] >= k_cache.dim(0)) {
        throw_error(ErrorCode::kInvalidArgument,
                    "paged_attention: sequence {} block {} is outside the cache ({} blocks)", s, seq.block_table[i],
                    k_cache.dim(0));
      }
    }
  }
  OMNI_DISPATCH(device, paged_attention(q, k_cache, v_cache, seqs, scale, sliding_window, out));
}

void paged_decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& context_lens,
                            const Tensor& block_tables, float scale, int sliding_window, Tensor& out) {
  const char* op = "paged_decode_attention";
  const Device device = check_attention_tensors(op, q, k_cache, v_cache, out);
  expect_dtype(op, "context_lens", context_lens, DType::kI32);
  expect_dtype(op, "block_tables", block_tables, DType::kI32);
  expect_shape(op, "context_lens", context_lens, {q.dim(0)});
  expect_rank(op, "block_tables", block_tables, 2);
  if (block_tables.dim(0) != q.dim(0)) {
    throw_error(ErrorCode::kInvalidArgument, "{}: block_tables has {} rows for {} rows of q", op, block_tables.dim(0),
                q.dim(0));
  }
  const int64_t block_size = k_cache.dim(1), width = block_tables.dim(1);
  if (context_lens.device().type == DeviceType::kCpu && block_tables.device().type == DeviceType::kCpu) {
    const int32_t* lens = context_lens.data<int32_t>();
    const int32_t* tables = block_tables.data<int32_t>();
    for (int64_t b = 0; b < q.dim(0); ++b) {
      if (lens[b] < 0) continue;
      const int64_t needed = (lens[b] + block_size) / block_size;
      if (needed > width) {
        throw_error(ErrorCode::kInvalidArgument, "{}: row {} needs {} blocks for {} tokens, its block table has {}", op,
                    b, needed, lens[b] + 1, width);
      }
      for (int64_t i = 0; i < needed; ++i) {
        const int32_t block = tables[b * width + i];
        if (block < 0 || block >= k_cache.dim(0)) {
          throw_error(ErrorCode::kInvalidArgument, "{}: row {} block {} is outside the cache ({} blocks)", op, b, block,
                      k_cache.dim(0));
        }
      }
    }
  }
#ifdef OMNI_HAVE_CUDA
  if (device.type == DeviceType::kCuda &&
      !cuda::paged_decode_attention_supports(q.dtype(), static_cast<int>(q.dim(2)))) {
    throw_error(ErrorCode::kUnsupported,
                "paged_decode_attention: no cuda kernel for {} with head_dim {} (bfloat16/float16; 16, 32, 64, 128 or "
                "256)",
                dtype_name(q.dtype()), q.dim(2));
  }
#endif
  const Tensor lens_here = index_tensor(op, "context_lens", context_lens, device);
  const Tensor tables_here = index_tensor(op, "block_tables", block_tables, device);
  OMNI_DISPATCH(device,
                paged_decode_attention(q, k_cache, v_cache, lens_here, tables_here, scale, sliding_window, out));
}

void silu_and_mul(const Tensor& x, Tensor& out) {
  const char* op = "silu_and_mul";
  const Device device = common_device(op, {{"x", &x}, {"out", &out}});
  expect_float(op, "x", x);
  expect_same_dtype(op, "out", out, "x", x);
  expect_rank(op, "x", x, 2);
  if (x.dim(1) % 2 != 0) throw_error(ErrorCode::kInvalidArgument, "silu_and_mul: x width {} is odd", x.dim(1));
  expect_shape(op, "out", out, {x.dim(0), x.dim(1) / 2});
  OMNI_DISPATCH(device, silu_and_mul(x, out));
}

void gelu(const Tensor& x, GeluApproximation approximation, Tensor& out) {
  const char* op = "gelu";
  const Device device = common_device(op, {{"x", &x}, {"out", &out}});
  expect_float(op, "x", x);
  expect_same_dtype(op, "out", out, "x", x);
  expect_shape(op, "out", out, x.shape());
  OMNI_DISPATCH(device, gelu(x, approximation, out));
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const char* op = "add";
  const Device device = common_device(op, {{"a", &a}, {"b", &b}, {"out", &out}});
  expect_float(op, "a", a);
  for (Arg arg : {Arg{"b", &b}, Arg{"out", &out}}) expect_same_dtype(op, arg.name, *arg.tensor, "a", a);
  expect_shape(op, "b", b, a.shape());
  expect_shape(op, "out", out, a.shape());
  OMNI_DISPATCH(device, add(a, b, out));
}

void softmax(const Tensor& x, Tensor& out) {
  const char* op = "softmax";
  const Device device = common_device(op, {{"x", &x}, {"out", &out}});
  expect_float(op, "x", x);
  expect_same_dtype(op, "out", out, "x", x);
  expect_rank(op, "x", x, 2);
  expect_shape(op, "out", out, x.shape());
  if (x.dim(1) == 0) throw_error(ErrorCode::kInvalidArgument, "softmax: rows are empty");
  OMNI_DISPATCH(device, softmax(x, out));
}

void argmax(const Tensor& x, Tensor& out) {
  const char* op = "argmax";
  const Device device = common_device(op, {{"x", &x}, {"out", &out}});
  expect_float(op, "x", x);
  expect_dtype(op, "out", out, DType::kI32);
  expect_rank(op, "x", x, 2);
  expect_shape(op, "out", out, {x.dim(0)});
  if (x.dim(1) == 0) throw_error(ErrorCode::kInvalidArgument, "argmax: rows are empty");
  OMNI_DISPATCH(device, argmax(x, out));
}

void top_k(const Tensor& x, int k, Tensor& values, Tensor& indices) {
  const char* op = "top_k";
  const Device device = common_device(op, {{"x", &x}, {"values", &values}, {"indices", &indices}});
  expect_float(op, "x", x);
  expect_rank(op, "x", x, 2);
  if (k < 1 || k > x.dim(1)) {
    throw_error(ErrorCode::kInvalidArgument, "top_k: k = {} must be in [1, {}]", k, x.dim(1));
  }
  expect_same_dtype(op, "values", values, "x", x);
  expect_dtype(op, "indices", indices, DType::kI32);
  expect_shape(op, "values", values, {x.dim(0), k});
  expect_shape(op, "indices", indices, {x.dim(0), k});
  OMNI_DISPATCH(device, top_k(x, k, values, indices));
}

namespace {

void check_sampling_params(const SamplingParams& p, size_t row, int64_t vocab) {
  auto fail = [row](const char* field, float value, const char* allowed) {
    throw_error(ErrorCode::kInvalidArgument, "sample: row {}: {} = {} must be {}", row, field, value, allowed);
  };
  if (std::isnan(p.temperature)) fail("temperature", p.temperature, "a number (<= 0 for greedy)");
  if (p.top_k < 0) fail("top_k", static_cast<float>(p.top_k), ">= 0 (0 for no limit)");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) fail("top_p", p.top_p, "in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) fail("min_p", p.min_p, "in [0, 1]");
  if (!(p.repetition_penalty > 0.0f) || std::isinf(p.repetition_penalty)) {
    fail("repetition_penalty", p.repetition_penalty, "finite and > 0");
  }
  if (!std::isfinite(p.presence_penalty)) fail("presence_penalty", p.presence_penalty, "finite");
  if (!std::isfinite(p.frequency_penalty)) fail("frequency_penalty", p.frequency_penalty, "finite");
  for (const auto& [field, tokens] :
       {std::pair{"prompt_tokens", p.prompt_tokens}, {"output_tokens", p.output_tokens}}) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] < 0 || tokens[i] >= vocab) {
        throw_error(ErrorCode::kInvalidArgument, "sample: row {}: {}[{}] = {} is outside the vocabulary [0, {})", row,
                    field, i, tokens[i], vocab);
      }
    }
  }
}

bool has_penalty(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

// The distinct penalised tokens of row `row`: its output tokens with their counts, and with a
// repetition penalty its prompt tokens too.
void collect_penalties(const SamplingParams& p, int32_t row, std::vector<PenalisedToken>& out) {
  std::vector<int32_t> output(p.output_tokens.begin(), p.output_tokens.end());
  std::sort(output.begin(), output.end());
  std::vector<int32_t> prompt;
  if (p.repetition_penalty != 1.0f) {
    prompt.assign(p.prompt_tokens.begin(), p.prompt_tokens.end());
    std::sort(prompt.begin(), prompt.end());
    prompt.erase(std::unique(prompt.begin(), prompt.end()), prompt.end());
  }
  size_t i = 0, j = 0;
  while (i < output.size() || j < prompt.size()) {
    const int32_t token = j == prompt.size() || (i < output.size() && output[i] < prompt[j]) ? output[i] : prompt[j];
    int32_t count = 0;
    while (i < output.size() && output[i] == token) {
      ++count;
      ++i;
    }
    const bool in_prompt = j < prompt.size() && prompt[j] == token;
    if (in_prompt) ++j;
    out.push_back({row, token, count, in_prompt ? 1 : 0});
  }
}

}  // namespace

void sample(Tensor& logits, std::span<const SamplingParams> params, Tensor& ids) {
  const char* op = "sample";
  const Device device = common_device(op, {{"logits", &logits}});
  expect_float(op, "logits", logits);
  expect_rank(op, "logits", logits, 2);
  if (!ids.defined() || !ids.is_contiguous()) {
    throw_error(ErrorCode::kInvalidArgument, "sample: ids must be a defined, contiguous tensor");
  }
  expect_dtype(op, "ids", ids, DType::kI32);
  expect_shape(op, "ids", ids, {logits.dim(0)});
  if (ids.device() != device && ids.device().type != DeviceType::kCpu) {
    throw_error(ErrorCode::kInvalidArgument, "sample: ids are on {} but logits are on {}", device_name(ids.device()),
                device_name(device));
  }
  if (static_cast<int64_t>(params.size()) != logits.dim(0)) {
    throw_error(ErrorCode::kInvalidArgument, "sample: {} sampling params for {} rows of logits", params.size(),
                logits.dim(0));
  }
  if (logits.dim(1) == 0) throw_error(ErrorCode::kInvalidArgument, "sample: rows are empty");
  std::vector<PenalisedToken> penalties;
  for (size_t r = 0; r < params.size(); ++r) {
    check_sampling_params(params[r], r, logits.dim(1));
    if (has_penalty(params[r])) collect_penalties(params[r], static_cast<int32_t>(r), penalties);
  }
  if (ids.device() == device) {
    OMNI_DISPATCH(device, sample(logits, params, penalties, ids));
    return;
  }
  Tensor on_device = Tensor::empty(ids.shape(), DType::kI32, device);
  OMNI_DISPATCH(device, sample(logits, params, penalties, on_device));
  const Tensor back = on_device.to(Device::cpu());
  std::copy_n(back.data<int32_t>(), back.numel(), ids.data<int32_t>());
}

void write_sampling_params(std::span<const SamplingParams> params, Tensor& packed) {
  const char* op = "write_sampling_params";
  common_device(op, {{"packed", &packed}});
  expect_dtype(op, "packed", packed, DType::kI32);
  expect_shape(op, "packed", packed, {static_cast<int64_t>(params.size()), kPackedSamplingParamsWords});
  std::vector<PackedSamplingParams> rows(params.size());
  for (size_t r = 0; r < params.size(); ++r) {
    if (has_penalty(params[r])) {
      throw_error(ErrorCode::kInvalidArgument,
                  "write_sampling_params: row {} has a repetition, presence or frequency penalty, which sample_packed "
                  "cannot apply (use sample)",
                  r);
    }
    // Without a penalty the token spans are never read, so no vocabulary bounds them.
    check_sampling_params(params[r], r, std::numeric_limits<int64_t>::max());
    rows[r] = pack(params[r]);
  }
  if (rows.empty()) return;
  copy_from_host({.memory = rows.data()}, DType::kI32, rows.size() * kPackedSamplingParamsWords, packed, 0);
}

void sample_packed(const Tensor& logits, const Tensor& packed, uint64_t step_offset, Tensor& ids) {
  const char* op = "sample_packed";
  const Device device = common_device(op, {{"logits", &logits}, {"packed", &packed}, {"ids", &ids}});
  expect_float(op, "logits", logits);
  expect_rank(op, "logits", logits, 2);
  expect_dtype(op, "packed", packed, DType::kI32);
  expect_shape(op, "packed", packed, {logits.dim(0), kPackedSamplingParamsWords});
  expect_dtype(op, "ids", ids, DType::kI32);
  expect_shape(op, "ids", ids, {logits.dim(0)});
  if (logits.dim(1) == 0) throw_error(ErrorCode::kInvalidArgument, "sample_packed: rows are empty");
  OMNI_DISPATCH(device, sample_packed(logits, packed, step_offset, ids));
}

void conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int dilation, int groups, Tensor& out,
            std::span<const int64_t> segments) {
  const char* op = "conv1d";
  const Device device = common_device(op, {{"x", &x}, {"weight", &weight}, {"out", &out}});
  expect_float(op, "x", x);
  for (Arg arg : {Arg{"weight", &weight}, Arg{"out", &out}}) expect_same_dtype(op, arg.name, *arg.tensor, "x", x);
  expect_rank(op, "x", x, 2);
  expect_rank(op, "weight", weight, 3);
  const int64_t c_in = x.dim(1), c_out = weight.dim(0), k = weight.dim(2);
  if (dilation < 1) throw_error(ErrorCode::kInvalidArgument, "conv1d: dilation {} must be >= 1", dilation);
  if (k < 1) throw_error(ErrorCode::kInvalidArgument, "conv1d: weight {} has no taps", shape_to_string(weight.shape()));
  if (groups != 1 && !(groups == c_in && c_out == c_in)) {
    throw_error(ErrorCode::kUnsupported,
                "conv1d: groups = {} with {} input and {} output channels (supported: 1, or "
                "depthwise with groups = channels)",
                groups, c_in, c_out);
  }
  if (weight.dim(1) * groups != c_in) {
    throw_error(ErrorCode::kInvalidArgument, "conv1d: weight {} does not take x {} with groups = {}",
                shape_to_string(weight.shape()), shape_to_string(x.shape()), groups);
  }
  const int64_t span = (k - 1) * dilation;
  if (segments.empty() && x.dim(0) < span) {
    throw_error(ErrorCode::kInvalidArgument, "conv1d: x has {} rows, fewer than the {} the kernel spans", x.dim(0),
                span + 1);
  }
  const std::vector<int64_t> segs = checked_segments(op, segments, x, span, "rows of history the kernel spans");
  const int64_t t_out = x.dim(0) - span * static_cast<int64_t>(segs.size());
  expect_shape(op, "out", out, {t_out, c_out});
  if (bias.defined()) {
    common_device(op, {{"x", &x}, {"bias", &bias}});
    expect_same_dtype(op, "bias", bias, "x", x);
    expect_shape(op, "bias", bias, {c_out});
  }
  expect_no_alias(op, "x", x, "out", out);
#ifdef OMNI_HAVE_CUDA
  if (device.type == DeviceType::kCuda) {
    cuda::conv1d(x, weight, bias, dilation, groups, segs, out);
    return;
  }
#endif
  (void)device;
  int64_t in_at = 0, out_at = 0;
  for (const int64_t rows : segs) {
    Tensor o = out.slice_rows(out_at, out_at + rows - span);
    cpu::conv1d(x.slice_rows(in_at, in_at + rows), weight, bias, dilation, groups, o);
    in_at += rows;
    out_at += rows - span;
  }
}

void conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int stride, int context, Tensor& out,
                      std::span<const int64_t> segments) {
  const char* op = "conv_transpose1d";
  const Device device = common_device(op, {{"x", &x}, {"weight", &weight}, {"out", &out}});
  expect_float(op, "x", x);
  for (Arg arg : {Arg{"weight", &weight}, Arg{"out", &out}}) expect_same_dtype(op, arg.name, *arg.tensor, "x", x);
  expect_rank(op, "x", x, 2);
  expect_rank(op, "weight", weight, 3);
  if (weight.dim(0) != x.dim(1)) {
    throw_error(ErrorCode::kInvalidArgument, "conv_transpose1d: weight {} does not take x {} ({} input channels)",
                shape_to_string(weight.shape()), shape_to_string(x.shape()), x.dim(1));
  }
  if (weight.dim(2) < 1) {
    throw_error(ErrorCode::kInvalidArgument, "conv_transpose1d: weight {} has no taps",
                shape_to_string(weight.shape()));
  }
  if (stride < 1) throw_error(ErrorCode::kInvalidArgument, "conv_transpose1d: stride {} must be >= 1", stride);
  if (context < 0 || (segments.empty() && context > x.dim(0))) {
    throw_error(ErrorCode::kInvalidArgument, "conv_transpose1d: context {} must be in [0, {}] (the rows of x)", context,
                x.dim(0));
  }
  const std::vector<int64_t> segs = checked_segments(op, segments, x, context, "rows of context");
  const int64_t t_out = (x.dim(0) - int64_t{context} * static_cast<int64_t>(segs.size())) * stride;
  expect_shape(op, "out", out, {t_out, weight.dim(1)});
  if (bias.defined()) {
    common_device(op, {{"x", &x}, {"bias", &bias}});
    expect_same_dtype(op, "bias", bias, "x", x);
    expect_shape(op, "bias", bias, {weight.dim(1)});
  }
  expect_no_alias(op, "x", x, "out", out);
#ifdef OMNI_HAVE_CUDA
  if (device.type == DeviceType::kCuda) {
    cuda::conv_transpose1d(x, weight, bias, stride, context, segs, out);
    return;
  }
#endif
  (void)device;
  int64_t in_at = 0, out_at = 0;
  for (const int64_t rows : segs) {
    const int64_t produced = (rows - context) * stride;
    Tensor o = out.slice_rows(out_at, out_at + produced);
    cpu::conv_transpose1d(x.slice_rows(in_at, in_at + rows), weight, bias, stride, context, o);
    in_at += rows;
    out_at += produced;
  }
}

void prepend_history(const Tensor& x, std::span<const int64_t> rows, std::span<Tensor> histories, Tensor& out) {
  const char* op = "prepend_history";
  const Device device = common_device(op, {{"x", &x}, {"out", &out}});
  expect_float(op, "x", x);
  expect_same_dtype(op, "out", out, "x", x);
  expect_rank(op, "x", x, 2);
  if (rows.size() != histories.size()) {
    throw_error(ErrorCode::kInvalidArgument, "prepend_history: {} row counts for {} histories", rows.size(),
                histories.size());
  }
  if (histories.empty()) throw_error(ErrorCode::kInvalidArgument, "prepend_history: no streams");
  const int64_t h = histories[0].defined() && histories[0].rank() == 2 ? histories[0].dim(0) : -1;
  int64_t sum = 0;
  for (size_t s = 0; s < histories.size(); ++s) {
    const std::string name = fmt::format("histories[{}]", s);
    common_device(op, {{"x", &x}, {name.c_str(), &histories[s]}});
    expect_same_dtype(op, name.c_str(), histories[s], "x", x);
    expect_shape(op, name.c_str(), histories[s], {h, x.dim(1)});
    expect_no_alias(op, "x", x, name.c_str(), histories[s]);
    expect_no_alias(op, "out", out, name.c_str(), histories[s]);
    for (size_t other = 0; other < s; ++other) {
      if (h > 0 && histories[other].raw() == histories[s].raw()) {
        throw_error(ErrorCode::kInvalidArgument, "prepend_history: histories[{}] and histories[{}] are one tensor",
                    other, s);
      }
    }
    if (rows[s] < 0) throw_error(ErrorCode::kInvalidArgument, "prepend_history: rows[{}] = {} is negative", s, rows[s]);
    sum += rows[s];
  }
  if (sum != x.dim(0)) {
    throw_error(ErrorCode::kInvalidArgument, "prepend_history: the rows sum to {} but x has {}", sum, x.dim(0));
  }
  expect_shape(op, "out", out, {x.dim(0) + h * static_cast<int64_t>(rows.size()), x.dim(1)});
  expect_no_alias(op, "x", x, "out", out);
  OMNI_DISPATCH(device, prepend_history(x, rows, histories, out));
}

void snake_beta(const Tensor& x, const Tensor& alpha, const Tensor& beta, Tensor& out) {
  const char* op = "snake_beta";
  const Device device = common_device(op, {{"x", &x}, {"alpha", &alpha}, {"beta", &beta}, {"out", &out}});
  expect_float(op, "x", x);
  for (Arg arg : {Arg{"alpha", &alpha}, Arg{"beta", &beta}, Arg{"out", &out}}) {
    expect_same_dtype(op, arg.name, *arg.tensor, "x", x);
  }
  expect_rank(op, "x", x, 2);
  expect_shape(op, "alpha", alpha, {x.dim(1)});
  expect_shape(op, "beta", beta, {x.dim(1)});
  expect_shape(op, "out", out, x.shape());
  OMNI_DISPATCH(device, snake_beta(x, alpha, beta, out));
}

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out) {
  const char* op = "layer_norm";
  const Device device = common_device(op, {{"x", &x}, {"weight", &weight}, {"bias", &bias}, {"out", &out}});
  expect_float(op, "x", x);
  for (Arg arg : {Arg{"weight", &weight}, Arg{"bias", &bias}, Arg{"out", &out}}) {
    expect_same_dtype(op, arg.name, *arg.tensor, "x", x);
  }
  if (x.rank() < 1) throw_error(ErrorCode::kInvalidArgument, "layer_norm: x must have rank >= 1");
  expect_shape(op, "weight", weight, {x.dim(-1)});
  expect_shape(op, "bias", bias, {x.dim(-1)});
  expect_shape(op, "out", out, x.shape());
  OMNI_DISPATCH(device, layer_norm(x, weight, bias, eps, out));
}

void add_scaled(const Tensor& a, const Tensor& b, const Tensor& scale, Tensor& out) {
  const char* op = "add_scaled";
  const Device device = common_device(op, {{"a", &a}, {"b", &b}, {"scale", &scale}, {"out", &out}});
  expect_float(op, "a", a);
  for (Arg arg : {Arg{"b", &b}, Arg{"scale", &scale}, Arg{"out", &out}}) {
    expect_same_dtype(op, arg.name, *arg.tensor, "a", a);
  }
  if (a.rank() < 1) throw_error(ErrorCode::kInvalidArgument, "add_scaled: a must have rank >= 1");
  expect_shape(op, "b", b, a.shape());
  expect_shape(op, "scale", scale, {a.dim(-1)});
  expect_shape(op, "out", out, a.shape());
  OMNI_DISPATCH(device, add_scaled(a, b, scale, out));
}

void add_row_scaled(const Tensor& a, const Tensor& b, const Tensor& scale, Tensor& out) {
  const char* op = "add_row_scaled";
  const Device device = common_device(op, {{"a", &a}, {"b", &b}, {"scale", &scale}, {"out", &out}});
  expect_float(op, "a", a);
  for (Arg arg : {Arg{"b", &b}, Arg{"scale", &scale}, Arg{"out", &out}}) {
    expect_same_dtype(op, arg.name, *arg.tensor, "a", a);
  }
  expect_rank(op, "a", a, 2);
  expect_shape(op, "b", b, a.shape());
  expect_shape(op, "scale", scale, {a.dim(0)});
  expect_shape(op, "out", out, a.shape());
  OMNI_DISPATCH(device, add_row_scaled(a, b, scale, out));
}

void clamp(const Tensor& x, float lo, float hi, Tensor& out) {
  const char* op = "clamp";
  const Device device = common_device(op, {{"x", &x}, {"out", &out}});
  expect_float(op, "x", x);
  expect_same_dtype(op, "out", out, "x", x);
  expect_shape(op, "out", out, x.shape());
  if (!(lo <= hi)) throw_error(ErrorCode::kInvalidArgument, "clamp: lo {} is above hi {}", lo, hi);
  OMNI_DISPATCH(device, clamp(x, lo, hi, out));
}

void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int padding, int stride, Tensor& out) {
  const char* op = "conv2d";
  const Device device = common_device(op, {{"x", &x}, {"weight", &weight}, {"out", &out}});
  expect_float(op, "x", x);
  expect_same_dtype(op, "weight", weight, "x", x);
  expect_same_dtype(op, "out", out, "x", x);
  expect_rank(op, "x", x, 3);
  expect_rank(op, "weight", weight, 4);
  const int64_t k = weight.dim(2);
  if (weight.dim(3) != k || weight.dim(1) != x.dim(2) || padding < 0 || stride < 1) {
    throw_error(ErrorCode::kInvalidArgument,
                "conv2d: weight {} does not fit x {} (square kernels over C_in = {}), padding {}, stride {}",
                shape_to_string(weight.shape()), shape_to_string(x.shape()), x.dim(2), padding, stride);
  }
  const int64_t h_span = x.dim(0) + 2 * padding - k, w_span = x.dim(1) + 2 * padding - k;
  const int64_t h = h_span < 0 ? 0 : h_span / stride + 1, w = w_span < 0 ? 0 : w_span / stride + 1;
  if (h <= 0 || w <= 0) {
    throw_error(ErrorCode::kInvalidArgument, "conv2d: x {} is smaller than the {}x{} kernel",
                shape_to_string(x.shape()), k, k);
  }
  if (bias.defined()) {
    common_device(op, {{"x", &x}, {"bias", &bias}});
    expect_same_dtype(op, "bias", bias, "x", x);
    expect_shape(op, "bias", bias, {weight.dim(0)});
  }
  expect_shape(op, "out", out, {h, w, weight.dim(0)});
  expect_no_alias(op, "x", x, "out", out);
  OMNI_DISPATCH(device, conv2d(x, weight, bias, padding, stride, out));
}

void group_norm(const Tensor& x, int groups, const Tensor& weight, const Tensor& bias, float eps, Tensor& out) {
  const char* op = "group_norm";
  const Device device = common_device(op, {{"x", &x}, {"weight", &weight}, {"bias", &bias}, {"out", &out}});
  expect_float(op, "x", x);
  for (Arg arg : {Arg{"weight", &weight}, Arg{"bias", &bias}, Arg{"out", &out}}) {
    expect_same_dtype(op, arg.name, *arg.tensor, "x", x);
  }
  expect_rank(op, "x", x, 2);
  if (groups <= 0 || x.dim(1) % groups != 0) {
    throw_error(ErrorCode::kInvalidArgument, "group_norm: {} channels do not split into {} groups", x.dim(1), groups);
  }
  expect_shape(op, "weight", weight, {x.dim(1)});
  expect_shape(op, "bias", bias, {x.dim(1)});
  expect_shape(op, "out", out, x.shape());
  OMNI_DISPATCH(device, group_norm(x, groups, weight, bias, eps, out));
}

void silu(const Tensor& x, Tensor& out) {
  const char* op = "silu";
  const Device device = common_device(op, {{"x", &x}, {"out", &out}});
  expect_float(op, "x", x);
  expect_same_dtype(op, "out", out, "x", x);
  expect_shape(op, "out", out, x.shape());
  OMNI_DISPATCH(device, silu(x, out));
}

void tanh(const Tensor& x, Tensor& out) {
  const char* op = "tanh";
  const Device device = common_device(op, {{"x", &x}, {"out", &out}});
  expect_float(op, "x", x);
  expect_same_dtype(op, "out", out, "x", x);
  expect_shape(op, "out", out, x.shape());
  OMNI_DISPATCH(device, tanh(x, out));
}

void upsample_nearest2x(const Tensor& x, Tensor& out) {
  const char* op = "upsample_nearest2x";
  const Device device = common_device(op, {{"x", &x}, {"out", &out}});
  expect_float(op, "x", x);
  expect_same_dtype(op, "out", out, "x", x);
  expect_rank(op, "x", x, 3);
  expect_shape(op, "out", out, {2 * x.dim(0), 2 * x.dim(1), x.dim(2)});
  OMNI_DISPATCH(device, upsample_nearest2x(x, out));
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out) {
  const char* op = "attention";
  const Device device = common_device(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}});
  expect_float(op, "q", q);
  for (Arg arg : {Arg{"k", &k}, Arg{"v", &v}, Arg{"out", &out}}) expect_same_dtype(op, arg.name, *arg.tensor, "q", q);
  expect_rank(op, "q", q, 3);
  expect_rank(op, "k", k, 3);
  if (k.dim(1) != q.dim(1) || k.dim(2) != q.dim(2)) {
    throw_error(ErrorCode::kInvalidArgument, "attention: k {} does not match q {} in heads and head size",
                shape_to_string(k.shape()), shape_to_string(q.shape()));
  }
  expect_shape(op, "v", v, k.shape());
  expect_shape(op, "out", out, q.shape());
  for (Arg arg : {Arg{"q", &q}, Arg{"k", &k}, Arg{"v", &v}}) expect_no_alias(op, arg.name, *arg.tensor, "out", out);
#ifdef OMNI_HAVE_CUDA
  if (device.type == DeviceType::kCuda) return cuda::dense_attention(q, k, v, scale, out);
#else
  (void)device;
#endif
  cpu::attention(q, k, v, scale, out);
}

void rotate_pairs(Tensor& x, const Tensor& cos, const Tensor& sin) {
  const char* op = "rotate_pairs";
  const Device device = common_device(op, {{"x", &x}, {"cos", &cos}, {"sin", &sin}});
  expect_float(op, "x", x);
  for (Arg arg : {Arg{"cos", &cos}, Arg{"sin", &sin}}) {
    // The angle tables may stay float32 under 16-bit activations (Z-Image rotates in float32).
    if (arg.tensor->dtype() != DType::kF32) expect_same_dtype(op, arg.name, *arg.tensor, "x", x);
  }
  expect_same_dtype(op, "sin", sin, "cos", cos);
  expect_rank(op, "x", x, 3);
  if (x.dim(2) % 2 != 0) throw_error(ErrorCode::kInvalidArgument, "rotate_pairs: head size {} is odd", x.dim(2));
  expect_shape(op, "cos", cos, {x.dim(0), x.dim(2) / 2});
  expect_shape(op, "sin", sin, {x.dim(0), x.dim(2) / 2});
  OMNI_DISPATCH(device, rotate_pairs(x, cos, sin));
}

void mul_columns(const Tensor& x, const Tensor& scale, Tensor& out) {
  const char* op = "mul_columns";
  const Device device = common_device(op, {{"x", &x}, {"scale", &scale}, {"out", &out}});
  expect_float(op, "x", x);
  expect_same_dtype(op, "scale", scale, "x", x);
  expect_same_dtype(op, "out", out, "x", x);
  if (x.rank() < 1) throw_error(ErrorCode::kInvalidArgument, "mul_columns: x must have rank >= 1");
  expect_shape(op, "scale", scale, {x.dim(-1)});
  expect_shape(op, "out", out, x.shape());
  OMNI_DISPATCH(device, mul_columns(x, scale, out));
}

void elu(const Tensor& x, Tensor& out) {
  const char* op = "elu";
  const Device device = common_device(op, {{"x", &x}, {"out", &out}});
  expect_float(op, "x", x);
  expect_same_dtype(op, "out", out, "x", x);
  expect_shape(op, "out", out, x.shape());
  OMNI_DISPATCH(device, elu(x, out));
}

void sigmoid(const Tensor& x, Tensor& out) {
  const char* op = "sigmoid";
  const Device device = common_device(op, {{"x", &x}, {"out", &out}});
  expect_float(op, "x", x);
  expect_same_dtype(op, "out", out, "x", x);
  expect_shape(op, "out", out, x.shape());
  OMNI_DISPATCH(device, sigmoid(x, out));
}

void unfold_rows(const Tensor& x, int kernel, int stride, int dilation, int64_t left, RowPadding padding, int64_t first,
                 Tensor& out) {
  const char* op = "unfold_rows";
  const Device device = common_device(op, {{"x", &x}, {"out", &out}});
  expect_float(op, "x", x);
  expect_same_dtype(op, "out", out, "x", x);
  expect_rank(op, "x", x, 2);
  expect_rank(op, "out", out, 2);
  if (kernel < 1 || stride < 1 || dilation < 1 || left < 0 || first < 0) {
    throw_error(ErrorCode::kInvalidArgument,
                "unfold_rows: kernel {}, stride {}, dilation {} must be >= 1 and left {}, first {} >= 0", kernel,
                stride, dilation, left, first);
  }
  const int64_t rows = x.dim(0), channels = x.dim(1);
  expect_shape(op, "out", out, {out.dim(0), static_cast<int64_t>(kernel) * channels});
  if (out.dim(0) == 0) return;
  if (rows == 0) throw_error(ErrorCode::kInvalidArgument, "unfold_rows: x has no rows");
  expect_no_alias(op, "x", x, "out", out);
  if (padding == RowPadding::kReflect) {
    // The rows read run from -left (the first output's first tap) to the last output's last tap.
    const int64_t lowest = first * stride - left;
    const int64_t highest = (first + out.dim(0) - 1) * stride + static_cast<int64_t>(kernel - 1) * dilation - left;
    if (-lowest > rows - 1 || highest - (rows - 1) > rows - 1) {
      throw_error(ErrorCode::kInvalidArgument,
                  "unfold_rows: x has {} rows, too few to reflect rows {} to {} into it (the input is too short for "
                  "the convolution's padding)",
                  rows, lowest, highest);
    }
  }
  OMNI_DISPATCH(device, unfold_rows(x, kernel, stride, dilation, left, padding, first, out));
}

void copy_columns(const Tensor& src, int64_t src_column, Tensor& dst, int64_t dst_column, int64_t width) {
  const char* op = "copy_columns";
  const Device device = common_device(op, {{"src", &src}, {"dst", &dst}});
  expect_float(op, "src", src);
  expect_same_dtype(op, "dst", dst, "src", src);
  expect_rank(op, "src", src, 2);
  expect_rank(op, "dst", dst, 2);
  if (dst.dim(0) != src.dim(0)) {
    throw_error(ErrorCode::kInvalidArgument, "copy_columns: src has {} rows but dst {}", src.dim(0), dst.dim(0));
  }
  if (width < 0 || src_column < 0 || dst_column < 0 || src_column + width > src.dim(1) ||
      dst_column + width > dst.dim(1)) {
    throw_error(ErrorCode::kInvalidArgument,
                "copy_columns: columns [{}, {}) of src {} or [{}, {}) of dst {} are outside the tensor", src_column,
                src_column + width, shape_to_string(src.shape()), dst_column, dst_column + width,
                shape_to_string(dst.shape()));
  }
  expect_no_alias(op, "src", src, "dst", dst);
  if (width == 0 || src.dim(0) == 0) return;
  OMNI_DISPATCH(device, copy_columns(src, src_column, dst, dst_column, width));
}

void weighted_mean_std(const Tensor& x, const Tensor& logits, Tensor& out) {
  const char* op = "weighted_mean_std";
  const Device device = common_device(op, {{"x", &x}, {"out", &out}});
  expect_dtype(op, "x", x, DType::kF32);
  expect_dtype(op, "out", out, DType::kF32);
  expect_rank(op, "x", x, 2);
  if (x.dim(0) < 1) throw_error(ErrorCode::kInvalidArgument, "weighted_mean_std: x has no rows");
  if (logits.defined()) {
    common_device(op, {{"x", &x}, {"logits", &logits}});
    expect_dtype(op, "logits", logits, DType::kF32);
    expect_shape(op, "logits", logits, x.shape());
  }
  expect_shape(op, "out", out, {2, x.dim(1)});
  OMNI_DISPATCH(device, weighted_mean_std(x, logits, out));
}

void nearest_codes(Tensor& residual, const Tensor& codebook, const Tensor& norms, const Tensor& dots, Tensor& codes,
                   int64_t column) {
  const char* op = "nearest_codes";
  const Device device = common_device(
      op, {{"residual", &residual}, {"codebook", &codebook}, {"norms", &norms}, {"dots", &dots}, {"codes", &codes}});
  expect_dtype(op, "residual", residual, DType::kF32);
  expect_dtype(op, "codebook", codebook, DType::kF32);
  expect_dtype(op, "norms", norms, DType::kF32);
  expect_dtype(op, "dots", dots, DType::kF32);
  expect_dtype(op, "codes", codes, DType::kI32);
  expect_rank(op, "residual", residual, 2);
  expect_rank(op, "codebook", codebook, 2);
  expect_rank(op, "codes", codes, 2);
  const int64_t frames = residual.dim(0), entries = codebook.dim(0);
  if (codebook.dim(1) != residual.dim(1) || entries < 1) {
    throw_error(ErrorCode::kInvalidArgument, "nearest_codes: codebook {} does not fit residual {}",
                shape_to_string(codebook.shape()), shape_to_string(residual.shape()));
  }
  expect_shape(op, "norms", norms, {entries});
  expect_shape(op, "dots", dots, {frames, entries});
  if (codes.dim(0) != frames || column < 0 || column >= codes.dim(1)) {
    throw_error(ErrorCode::kInvalidArgument, "nearest_codes: codes {} has no column {} for {} frames",
                shape_to_string(codes.shape()), column, frames);
  }
  if (frames == 0) return;
  OMNI_DISPATCH(device, nearest_codes(residual, codebook, norms, dots, codes, column));
}

}  // namespace omni::tensor::ops
