// The audio encoders' ops on CUDA (tensor/ops.h): ELU, sigmoid, the unfolding of a 1-D
// convolution's input rows, column copies, attentive statistics pooling and the nearest-entry step of
// a residual vector quantizer. The pooling and the quantizer sum in float64 in the CPU's order, so
// that, given the same inputs, they give the CPU's results.
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "tensor/cuda/common.cuh"
#include "tensor/cuda/kernels.h"

namespace omni::tensor::cuda {
namespace {

constexpr int kThreads = 256;

cudaStream_t stream_of(const Tensor& t) { return stream_for(t.device().index); }

template <typename T>
__global__ void elu_kernel(const T* x, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float v = to_float(x[i]);
    out[i] = from_float<T>(v > 0.0f ? v : expm1f(v));
  }
}

template <typename T>
__global__ void sigmoid_kernel(const T* x, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = from_float<T>(1.0f / (1.0f + expf(-to_float(x[i]))));
  }
}

// One thread per element of out [R, kernel * C].
template <typename T>
__global__ void unfold_rows_kernel(const T* x, T* out, int64_t rows, int64_t channels, int kernel, int stride,
                                   int dilation, int64_t left, int padding, int64_t first, int64_t n) {
  const int64_t width = kernel * channels;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / width, rest = i % width, j = rest / channels, c = rest % channels;
    int64_t src = (first + r) * stride + j * dilation - left;
    if (src < 0 || src >= rows) {
      if (padding == static_cast<int>(ops::RowPadding::kZeros)) {
        out[i] = from_float<T>(0.0f);
        continue;
      }
      if (padding == static_cast<int>(ops::RowPadding::kReplicate)) {
        src = src < 0 ? 0 : rows - 1;
      } else {
        src = src < 0 ? -src : 2 * (rows - 1) - src;
      }
    }
    out[i] = x[src * channels + c];
  }
}

// One thread per channel of x [T, C]: the softmax weights of its logits (equal without), then the
// weighted mean and standard deviation, in float64 as the CPU.
__global__ void weighted_mean_std_kernel(const float* x, const float* logits, float* out, int64_t steps,
                                         int64_t channels) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= channels) return;
  double peak = -INFINITY, z = 0;
  if (logits) {
    for (int64_t t = 0; t < steps; ++t) peak = fmax(peak, static_cast<double>(logits[t * channels + c]));
    for (int64_t t = 0; t < steps; ++t) z += exp(logits[t * channels + c] - peak);
  }
  auto weight = [&](int64_t t) {
    return logits ? exp(logits[t * channels + c] - peak) / z : 1.0 / static_cast<double>(steps);
  };
  double mean = 0;
  for (int64_t t = 0; t < steps; ++t) mean += weight(t) * x[t * channels + c];
  double var = 0;
  for (int64_t t = 0; t < steps; ++t) {
    const double d = x[t * channels + c] - mean;
    var += weight(t) * d * d;
  }
  out[c] = static_cast<float>(mean);
  out[channels + c] = static_cast<float>(sqrt(fmax(var, 1e-12)));
}

// A block reduction of one double per thread (kThreads threads): the minimum or the sum.
template <bool kMin>
__device__ double block_reduce(double v, double* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const double o = scratch[threadIdx.x + s];
      scratch[threadIdx.x] = kMin ? fmin(scratch[threadIdx.x], o) : scratch[threadIdx.x] + o;
    }
    __syncthreads();
  }
  const double result = scratch[0];
  __syncthreads();
  return result;
}

// One block per frame: the ranking by norms - 2 dots, the exact float64 distance of the entries
// within tolerance of the best (each summed over d in order by one thread, as the CPU), the lowest
// index among the nearest, then the residual update.
__global__ void nearest_codes_kernel(float* residual, const float* codebook, const float* norms, const float* dots,
                                     int32_t* codes, int64_t dim, int64_t entries, int64_t q, int64_t column) {
  __shared__ double scratch[kThreads];
  __shared__ int64_t chosen_index[kThreads];
  const int64_t f = blockIdx.x;
  float* r = residual + f * dim;
  const float* row = dots + f * entries;
  double part = 0;
  for (int64_t d = threadIdx.x; d < dim; d += kThreads) part += static_cast<double>(r[d]) * r[d];
  // The CPU sums the magnitude in order; the tolerance only has to be of its size, so any order does.
  const double magnitude = block_reduce<false>(part, scratch);
  double best = INFINITY;
  for (int64_t n = threadIdx.x; n < entries; n += kThreads) {
    best = fmin(best, static_cast<double>(norms[n]) - 2.0 * row[n]);
  }
  best = block_reduce<true>(best, scratch);
  const double tolerance = 1e-4 * (magnitude + fabs(best) + 1.0);
  double mine = INFINITY;
  int64_t mine_index = INT64_MAX;
  for (int64_t n = threadIdx.x; n < entries; n += kThreads) {
    if (static_cast<double>(norms[n]) - 2.0 * row[n] > best + tolerance) continue;
    const float* e = codebook + n * dim;
    double distance = 0;
    for (int64_t d = 0; d < dim; ++d) {
      const double diff = static_cast<double>(r[d]) - e[d];
      distance += diff * diff;
    }
    if (distance < mine) {  // n rises within a thread: the first of equal distances stays
      mine = distance;
      mine_index = n;
    }
  }
  scratch[threadIdx.x] = mine;
  chosen_index[threadIdx.x] = mine_index;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const double o = scratch[threadIdx.x + s];
      const int64_t oi = chosen_index[threadIdx.x + s];
      if (o < scratch[threadIdx.x] || (o == scratch[threadIdx.x] && oi < chosen_index[threadIdx.x])) {
        scratch[threadIdx.x] = o;
        chosen_index[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  const int64_t chosen = chosen_index[0] == INT64_MAX ? 0 : chosen_index[0];
  if (threadIdx.x == 0) codes[f * q + column] = static_cast<int32_t>(chosen);
  const float* e = codebook + chosen * dim;
  for (int64_t d = threadIdx.x; d < dim; d += kThreads) r[d] -= e[d];
}

}  // namespace

void elu(const Tensor& x, Tensor& out) {
  if (out.numel() == 0) return;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    elu_kernel<T>
        <<<blocks_for(out.numel(), kThreads), kThreads, 0, stream_of(out)>>>(ptr<T>(x), ptr<T>(out), out.numel());
  });
  check_launch("elu_kernel", out);
}

void sigmoid(const Tensor& x, Tensor& out) {
  if (out.numel() == 0) return;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    sigmoid_kernel<T>
        <<<blocks_for(out.numel(), kThreads), kThreads, 0, stream_of(out)>>>(ptr<T>(x), ptr<T>(out), out.numel());
  });
  check_launch("sigmoid_kernel", out);
}

void unfold_rows(const Tensor& x, int kernel, int stride, int dilation, int64_t left, ops::RowPadding padding,
                 int64_t first, Tensor& out) {
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    unfold_rows_kernel<T><<<blocks_for(out.numel(), kThreads), kThreads, 0, stream_of(out)>>>(
        ptr<T>(x), ptr<T>(out), x.dim(0), x.dim(1), kernel, stride, dilation, left, static_cast<int>(padding), first,
        out.numel());
  });
  check_launch("unfold_rows_kernel", out);
}

void copy_columns(const Tensor& src, int64_t src_column, Tensor& dst, int64_t dst_column, int64_t width) {
  const size_t element = dtype_size(src.dtype());
  check(cudaMemcpy2DAsync(static_cast<char*>(dst.raw()) + dst_column * element, dst.dim(1) * element,
                          static_cast<const char*>(src.raw()) + src_column * element, src.dim(1) * element,
                          width * element, src.dim(0), cudaMemcpyDeviceToDevice, stream_of(dst)),
        "copy_columns", dst.device().index);
}

void weighted_mean_std(const Tensor& x, const Tensor& logits, Tensor& out) {
  const int64_t channels = x.dim(1);
  weighted_mean_std_kernel<<<blocks_for(channels, 128), 128, 0, stream_of(out)>>>(
      ptr<float>(x), logits.defined() ? ptr<float>(logits) : nullptr, ptr<float>(out), x.dim(0), channels);
  check_launch("weighted_mean_std_kernel", out);
}

void nearest_codes(Tensor& residual, const Tensor& codebook, const Tensor& norms, const Tensor& dots, Tensor& codes,
                   int64_t column) {
  nearest_codes_kernel<<<static_cast<unsigned>(residual.dim(0)), kThreads, 0, stream_of(residual)>>>(
      ptr<float>(residual), ptr<float>(codebook), ptr<float>(norms), ptr<float>(dots), ptr<int32_t>(codes),
      residual.dim(1), codebook.dim(0), codes.dim(1), column);
  check_launch("nearest_codes_kernel", residual);
}

}  // namespace omni::tensor::cuda
