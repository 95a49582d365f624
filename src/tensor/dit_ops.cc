#include "tensor/dit_ops.h"

#include <cstring>
#include <initializer_list>
#include <utility>

#include "base/error.h"
#include "tensor/ops.h"

#ifdef OMNI_HAVE_CUDA
#include "tensor/cuda/dit_kernels.h"
#endif

namespace omni::tensor::ops {
namespace {

bool is_float(const Tensor& t) {
  return t.dtype() == DType::kF32 || t.dtype() == DType::kBF16 || t.dtype() == DType::kF16;
}

// Defined, contiguous, on the first tensor's device, in its floating dtype (except the names in
// `any_float`, which only need a floating dtype).
void check_common(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> args,
                  std::initializer_list<const char*> any_float = {}) {
  const Tensor& first = *args.begin()->second;
  for (const auto& [name, t] : args) {
    if (!t->defined()) throw_error(ErrorCode::kInvalidArgument, "{}: {} is not defined", op, name);
    if (!t->is_contiguous()) throw_error(ErrorCode::kInvalidArgument, "{}: {} is not contiguous", op, name);
    if (t->device() != first.device()) {
      throw_error(ErrorCode::kInvalidArgument, "{}: {} is on {} but {} is on {}", op, name, device_name(t->device()),
                  args.begin()->first, device_name(first.device()));
    }
    bool loose = false;
    for (const char* n : any_float) loose = loose || std::strcmp(n, name) == 0;
    if (!is_float(*t) || (!loose && t->dtype() != first.dtype())) {
      throw_error(ErrorCode::kInvalidArgument, "{}: {} is {}, expected {} like {}", op, name, dtype_name(t->dtype()),
                  dtype_name(first.dtype()), args.begin()->first);
    }
  }
  if (first.device().type == DeviceType::kCpu && first.dtype() != DType::kF32) {
    throw_error(ErrorCode::kInvalidArgument, "{}: the CPU computes in float32, got {}", op, dtype_name(first.dtype()));
  }
}

void expect_shape(const char* op, const char* name, const Tensor& t, const Shape& want) {
  if (t.shape() != want) {
    throw_error(ErrorCode::kInvalidArgument, "{}: {} must be {}, got {}", op, name, shape_to_string(want),
                shape_to_string(t.shape()));
  }
}

void check_row_vectors(const char* op, const Tensor& x, const Tensor& weight, const char* second_name,
                       const Tensor& second) {
  if (x.rank() < 1 || x.dim(-1) == 0) {
    throw_error(ErrorCode::kInvalidArgument, "{}: x must be [..., D] with D >= 1, got {}", op,
                shape_to_string(x.shape()));
  }
  expect_shape(op, "weight", weight, {x.dim(-1)});
  expect_shape(op, second_name, second, {x.dim(-1)});
}

bool on_cuda(const Tensor& t) { return t.device().type == DeviceType::kCuda; }

#ifndef OMNI_HAVE_CUDA
[[noreturn]] void no_cuda(const char* op) {
  throw_error(ErrorCode::kUnsupported, "{}: this build has no CUDA backend", op);
}
#endif

}  // namespace

void modulated_rms_norm(const Tensor& x, const Tensor& weight, const Tensor& scale, float eps, Tensor& out) {
  const char* op = "modulated_rms_norm";
  check_common(op, {{"x", &x}, {"weight", &weight}, {"scale", &scale}, {"out", &out}});
  check_row_vectors(op, x, weight, "scale", scale);
  expect_shape(op, "out", out, x.shape());
  if (on_cuda(x)) {
#ifdef OMNI_HAVE_CUDA
    return cuda::modulated_rms_norm(x, weight, scale, eps, out);
#else
    no_cuda(op);
#endif
  }
  rms_norm(x, weight, eps, out);
  mul_columns(out, scale, out);
}

void gated_rms_norm_add(Tensor& residual, const Tensor& y, const Tensor& weight, const Tensor& gate, float eps) {
  const char* op = "gated_rms_norm_add";
  check_common(op, {{"residual", &residual}, {"y", &y}, {"weight", &weight}, {"gate", &gate}});
  check_row_vectors(op, y, weight, "gate", gate);
  expect_shape(op, "residual", residual, y.shape());
  if (residual.raw() == y.raw()) throw_error(ErrorCode::kInvalidArgument, "{}: residual and y overlap", op);
  if (on_cuda(y)) {
#ifdef OMNI_HAVE_CUDA
    return cuda::gated_rms_norm_add(residual, y, weight, gate, eps);
#else
    no_cuda(op);
#endif
  }
  Tensor normed = Tensor::empty(y.shape(), y.dtype(), y.device());
  rms_norm(y, weight, eps, normed);
  add_scaled(residual, normed, gate, residual);
}

void qkv_norm_rotate(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps, const Tensor& cos,
                     const Tensor& sin, Tensor& q, Tensor& k, Tensor& v) {
  const char* op = "qkv_norm_rotate";
  check_common(op, {{"qkv", &qkv}, {"q", &q}, {"k", &k}, {"v", &v}, {"cos", &cos}, {"sin", &sin}}, {"cos", "sin"});
  if (q.rank() != 3 || q.dim(2) % 2 != 0 || q.dim(2) == 0) {
    throw_error(ErrorCode::kInvalidArgument, "{}: q must be [T, heads, D] with D even, got {}", op,
                shape_to_string(q.shape()));
  }
  const int64_t tokens = q.dim(0), heads = q.dim(1), d = q.dim(2);
  expect_shape(op, "k", k, q.shape());
  expect_shape(op, "v", v, q.shape());
  expect_shape(op, "qkv", qkv, {tokens, 3 * heads * d});
  expect_shape(op, "cos", cos, {tokens, d / 2});
  expect_shape(op, "sin", sin, {tokens, d / 2});
  if (cos.dtype() != sin.dtype() || (cos.dtype() != DType::kF32 && cos.dtype() != qkv.dtype())) {
    throw_error(ErrorCode::kInvalidArgument, "{}: cos and sin must share float32 or qkv's dtype, got {} and {}", op,
                dtype_name(cos.dtype()), dtype_name(sin.dtype()));
  }
  if (q_norm.defined() != k_norm.defined()) {
    throw_error(ErrorCode::kInvalidArgument, "{}: q_norm and k_norm must both be given or both be undefined", op);
  }
  if (q_norm.defined()) {
    check_common(op, {{"qkv", &qkv}, {"q_norm", &q_norm}, {"k_norm", &k_norm}});
    expect_shape(op, "q_norm", q_norm, {d});
    expect_shape(op, "k_norm", k_norm, {d});
  }
  for (const Tensor* t : {&q, &k, &v}) {
    const char* begin = static_cast<const char*>(t->raw());
    const char* qkv_begin = static_cast<const char*>(qkv.raw());
    if (t->numel() > 0 && begin < qkv_begin + qkv.nbytes() && qkv_begin < begin + t->nbytes()) {
      throw_error(ErrorCode::kInvalidArgument, "{}: an output overlaps qkv", op);
    }
  }
  if (on_cuda(qkv)) {
#ifdef OMNI_HAVE_CUDA
    return cuda::qkv_norm_rotate(qkv, q_norm, k_norm, eps, cos, sin, q, k, v);
#else
    no_cuda(op);
#endif
  }
  const int64_t width = heads * d;
  const float* src = qkv.data<float>();
  float* dst[] = {q.data<float>(), k.data<float>(), v.data<float>()};
  for (int64_t t = 0; t < tokens; ++t) {
    for (int part = 0; part < 3; ++part) {
      std::memcpy(dst[part] + t * width, src + (t * 3 + part) * width, static_cast<size_t>(width) * sizeof(float));
    }
  }
  if (q_norm.defined()) {
    rms_norm(q, q_norm, eps, q);
    rms_norm(k, k_norm, eps, k);
  }
  rotate_pairs(q, cos, sin);
  rotate_pairs(k, cos, sin);
}

}  // namespace omni::tensor::ops
