// The per-element and per-row ops of the audio decoders on CUDA (tensor/ops.h): SnakeBeta,
// LayerNorm, the LayerScale add and clamp. Arithmetic is float32, as on the CPU.
#include <cstdint>

#include "tensor/cuda/common.cuh"
#include "tensor/cuda/kernels.h"

namespace omni::tensor::cuda {
namespace {

constexpr int kThreads = 256;

cudaStream_t stream_of(const Tensor& t) { return stream_for(t.device().index); }

template <typename T>
__global__ void snake_beta_kernel(const T* x, const T* alpha, const T* beta, T* out, int64_t n, int channels) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int c = static_cast<int>(i % channels);
    const float v = to_float(x[i]);
    // sinf/expf, not the fast intrinsics: the CPU's std::sin/std::exp are the reference.
    const float s = sinf(expf(to_float(alpha[c])) * v);
    out[i] = from_float<T>(v + s * s * (1.0f / (expf(to_float(beta[c])) + 1e-9f)));
  }
}

// One block per row: the mean, then the variance around it (two passes, as the CPU).
template <typename T>
__global__ void layer_norm_kernel(const T* x, const T* weight, const T* bias, float eps, T* out, int64_t d) {
  __shared__ float scratch[32];
  const T* row = x + blockIdx.x * d;
  T* dst = out + blockIdx.x * d;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) sum += to_float(row[i]);
  const float mean = block_sum(sum, scratch) / static_cast<float>(d);
  float var = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float centred = to_float(row[i]) - mean;
    var += centred * centred;
  }
  const float inv = rsqrtf(block_sum(var, scratch) / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    dst[i] = from_float<T>((to_float(row[i]) - mean) * inv * to_float(weight[i]) + to_float(bias[i]));
  }
}

template <typename T>
__global__ void add_scaled_kernel(const T* a, const T* b, const T* scale, T* out, int64_t n, int64_t d) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]) * to_float(scale[i % d]));
  }
}

template <typename T>
__global__ void add_row_scaled_kernel(const T* a, const T* b, const T* scale, T* out, int64_t n, int64_t d) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]) * to_float(scale[i / d]));
  }
}

template <typename T>
__global__ void clamp_kernel(const T* x, T* out, int64_t n, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = from_float<T>(fminf(fmaxf(to_float(x[i]), lo), hi));
  }
}

}  // namespace

void snake_beta(const Tensor& x, const Tensor& alpha, const Tensor& beta, Tensor& out) {
  if (out.numel() == 0) return;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    snake_beta_kernel<T><<<blocks_for(out.numel(), kThreads), kThreads, 0, stream_of(out)>>>(
        ptr<T>(x), ptr<T>(alpha), ptr<T>(beta), ptr<T>(out), out.numel(), static_cast<int>(x.dim(1)));
  });
  check_launch("snake_beta_kernel", out);
}

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out) {
  const int64_t d = x.dim(-1);
  const int64_t rows = d == 0 ? 0 : x.numel() / d;
  if (rows == 0) return;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    layer_norm_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream_of(out)>>>(
        ptr<T>(x), ptr<T>(weight), ptr<T>(bias), eps, ptr<T>(out), d);
  });
  check_launch("layer_norm_kernel", out);
}

void add_scaled(const Tensor& a, const Tensor& b, const Tensor& scale, Tensor& out) {
  if (out.numel() == 0) return;
  with_float_type(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    add_scaled_kernel<T><<<blocks_for(out.numel(), kThreads), kThreads, 0, stream_of(out)>>>(
        ptr<T>(a), ptr<T>(b), ptr<T>(scale), ptr<T>(out), out.numel(), a.dim(-1));
  });
  check_launch("add_scaled_kernel", out);
}

void add_row_scaled(const Tensor& a, const Tensor& b, const Tensor& scale, Tensor& out) {
  if (out.numel() == 0) return;
  with_float_type(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    add_row_scaled_kernel<T><<<blocks_for(out.numel(), kThreads), kThreads, 0, stream_of(out)>>>(
        ptr<T>(a), ptr<T>(b), ptr<T>(scale), ptr<T>(out), out.numel(), a.dim(1));
  });
  check_launch("add_row_scaled_kernel", out);
}

void clamp(const Tensor& x, float lo, float hi, Tensor& out) {
  if (out.numel() == 0) return;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    clamp_kernel<T><<<blocks_for(out.numel(), kThreads), kThreads, 0, stream_of(out)>>>(ptr<T>(x), ptr<T>(out),
                                                                                        out.numel(), lo, hi);
  });
  check_launch("clamp_kernel", out);
}

}  // namespace omni::tensor::cuda
