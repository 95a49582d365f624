#include "tensor/ops.h"

#include <initializer_list>

#include "base/error.h"
#include "tensor/cpu/kernels.h"

#ifdef OMNI_HAVE_CUDA
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

// Host-side view of int32 ids the dispatcher must validate (a copy when they live on a GPU).
Tensor host_ints(const Tensor& t) { return t.device().type == DeviceType::kCpu ? t : t.to(Device::cpu()); }

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

}  // namespace

void embedding(const Tensor& table, const Tensor& ids, Tensor& out, IndexCheck check) {
  const char* op = "embedding";
  const Device device = common_device(op, {{"table", &table}, {"ids", &ids}, {"out", &out}});
  expect_float(op, "table", table);
  expect_dtype(op, "ids", ids, DType::kI32);
  expect_rank(op, "table", table, 2);
  expect_rank(op, "ids", ids, 1);
  expect_shape(op, "out", out, {ids.dim(0), table.dim(1)});
  expect_same_dtype(op, "out", out, "table", table);
  const bool trusted = check == IndexCheck::kTrustCaller && ids.device().type != DeviceType::kCpu;
  const Tensor ids_host = trusted ? Tensor() : host_ints(ids);
  const int32_t* id = trusted ? nullptr : ids_host.data<int32_t>();
  for (int64_t t = 0; !trusted && t < ids.numel(); ++t) {
    if (id[t] < 0 || id[t] >= table.dim(0)) {
      throw_error(ErrorCode::kInvalidArgument, "embedding: token id {} at index {} is outside the vocabulary [0, {})",
                  id[t], t, table.dim(0));
    }
  }
  OMNI_DISPATCH(device, embedding(table, ids, out));
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

void rotary_embedding(Tensor& x, const Tensor& positions, const RopeSpec& spec) {
  const char* op = "rotary_embedding";
  const Device device = common_device(op, {{"x", &x}, {"positions", &positions}});
  expect_float(op, "x", x);
  expect_dtype(op, "positions", positions, DType::kI32);
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
  OMNI_DISPATCH(device, rotary_embedding(x, positions, spec));
}

void store_kv(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_cache, Tensor& v_cache,
              IndexCheck check) {
  const char* op = "store_kv";
  const Device device =
      common_device(op, {{"k", &k}, {"v", &v}, {"slots", &slots}, {"k_cache", &k_cache}, {"v_cache", &v_cache}});
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
  const int64_t capacity = k_cache.dim(0) * k_cache.dim(1);
  const bool trusted = check == IndexCheck::kTrustCaller && slots.device().type != DeviceType::kCpu;
  const Tensor slots_host = trusted ? Tensor() : host_ints(slots);
  const int32_t* slot = trusted ? nullptr : slots_host.data<int32_t>();
  for (int64_t t = 0; !trusted && t < slots.numel(); ++t) {
    if (slot[t] < 0 || slot[t] >= capacity) {
      throw_error(ErrorCode::kInvalidArgument, "store_kv: slot {} of token {} is outside the cache ({} slots)", slot[t],
                  t, capacity);
    }
  }
  OMNI_DISPATCH(device, store_kv(k, v, slots, k_cache, v_cache));
}

void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, std::span<const PagedSequence> seqs,
                     float scale, int sliding_window, Tensor& out) {
  const char* op = "paged_attention";
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
    throw_error(ErrorCode::kInvalidArgument, "paged_attention: q head_dim {} differs from the cache's {}", q.dim(2),
                k_cache.dim(3));
  }
  if (kv_heads == 0 || heads % kv_heads != 0) {
    throw_error(ErrorCode::kInvalidArgument, "paged_attention: {} query heads are not a multiple of {} kv heads", heads,
                kv_heads);
  }
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

}  // namespace omni::tensor::ops
