// The image ops of image generators on CUDA (tensor/ops.h): conv2d, group_norm, silu, nearest 2x
// upsampling, rotate_pairs, mul_columns and tanh, on channels-last images [H, W, C].
//
// conv2d: each tile of output pixels is one matrix product against the weight reordered, per call,
// from its PyTorch layout [C_out, C_in, k, k] into [C_out, k, k, C_in] (a few MiB), after an unfolding
// kernel wrote the tile's patches in that (ky, kx, c_in) order (zeros outside the image): each
// patch row is then k * k runs of a pixel's C_in contiguous channels, copied 16 bytes at a time, so
// both the reads of the image and the writes of the patches coalesce. Tiles bound the scratch (a
// 3x3 layer of 128 channels over a 1024 x 1024 image would unfold into 1.2 G elements). A 1x1
// kernel without padding is the product itself.
//
// group_norm: per-channel partial sums over chunks of rows (one thread per channel, so the reads of a
// row coalesce), in float64 as the CPU sums; one block per group then adds the chunks' partials of
// its channels into the mean and the inverse deviation; an elementwise kernel normalises. No atomics,
// so a call gives the same bits every time.
#include <algorithm>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include "tensor/cuda/common.cuh"
#include "tensor/cuda/image_kernels.h"
#include "tensor/cuda/kernels.h"

namespace omni::tensor::cuda {
namespace {

constexpr int kThreads = 256;
// Elements of unfolded patches a convolution holds at once (128 MiB of bfloat16).
constexpr int64_t kScratchElements = int64_t{64} << 20;
// Rows each partial sum of group_norm covers.
constexpr int64_t kNormChunkRows = 64;

cudaStream_t stream_of(const Tensor& t) { return stream_for(t.device().index); }

// cols[r, (ky * k + kx) * c_in + c] = x[oy * s + ky - pad, ox * s + kx - pad, c] (zero outside) for the
// output pixels p = first + r, (oy, ox) = (p / out_w, p % out_w). One thread per V consecutive
// channels of one tap of one row (V = 16 bytes of T where c_in allows, else 1); int32 indices (a
// tile holds fewer than 2^31 elements).
template <typename T, int V>
__global__ void unfold2d_kernel(const T* x, T* cols, int64_t first, int rows, int in_h, int in_w, int c_in, int k,
                                int pad, int stride, int out_w) {
  using Chunk = std::conditional_t<V == 1, T, uint4>;
  const int vectors = c_in / V, taps = k * k;
  const int per_row = taps * vectors;
  const int total = rows * per_row;
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += gridDim.x * blockDim.x) {
    const int r = idx / per_row;
    const int rem = idx - r * per_row;
    const int tap = rem / vectors, v = rem - tap * vectors;
    const int ky = tap / k, kx = tap - ky * k;
    const int64_t p = first + r;
    const int oy = static_cast<int>(p / out_w), ox = static_cast<int>(p - int64_t{oy} * out_w);
    const int iy = oy * stride + ky - pad, ix = ox * stride + kx - pad;
    Chunk value;
    if (iy >= 0 && iy < in_h && ix >= 0 && ix < in_w) {
      value = reinterpret_cast<const Chunk*>(x + (int64_t{iy} * in_w + ix) * c_in)[v];
    } else if constexpr (V == 1) {
      value = from_float<T>(0.0f);
    } else {
      value = make_uint4(0, 0, 0, 0);
    }
    reinterpret_cast<Chunk*>(cols + int64_t{r} * taps * c_in + int64_t{tap} * c_in)[v] = value;
  }
}

// out[o, tap * c_in + c] = w[o, c * taps + tap]: the PyTorch conv weight in the unfolded patches' order.
template <typename T>
__global__ void reorder_conv_weight_kernel(const T* w, T* out, int64_t n, int c_in, int taps) {
  const int64_t width = int64_t{c_in} * taps;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = i / width;
    const int rem = static_cast<int>(i - o * width);
    const int tap = rem / c_in, c = rem - tap * c_in;
    out[i] = w[o * width + int64_t{c} * taps + tap];
  }
}

// partial[chunk, c] = (sum, sum of squares) of x[rows of the chunk, c].
template <typename T>
__global__ void channel_sums_kernel(const T* x, double2* partial, int64_t rows, int channels) {
  const int64_t begin = blockIdx.x * kNormChunkRows;
  const int64_t end = min(rows, begin + kNormChunkRows);
  for (int c = threadIdx.x; c < channels; c += blockDim.x) {
    double sum = 0.0, sq = 0.0;
    for (int64_t r = begin; r < end; ++r) {
      const double v = to_float(x[r * channels + c]);
      sum += v;
      sq += v * v;
    }
    partial[blockIdx.x * int64_t{channels} + c] = make_double2(sum, sq);
  }
}

// One block per group: stats[g] = (mean, 1 / sqrt(biased variance + eps)).
__global__ void group_stats_kernel(const double2* partial, float2* stats, int64_t chunks, int channels, int per,
                                   int64_t rows, float eps) {
  __shared__ double sums[kThreads], squares[kThreads];
  const int g = blockIdx.x;
  double sum = 0.0, sq = 0.0;
  const int64_t n = chunks * per;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t chunk = i / per;
    const double2 v = partial[chunk * channels + g * per + (i - chunk * per)];
    sum += v.x;
    sq += v.y;
  }
  sums[threadIdx.x] = sum;
  squares[threadIdx.x] = sq;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      sums[threadIdx.x] += sums[threadIdx.x + stride];
      squares[threadIdx.x] += squares[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double count = static_cast<double>(rows) * per;
    const double mean = sums[0] / count;
    const double var = fmax(0.0, squares[0] / count - mean * mean);
    stats[g] = make_float2(static_cast<float>(mean), static_cast<float>(1.0 / sqrt(var + eps)));
  }
}

// I: the index type, int32_t where the tensor allows (64-bit division costs far more than the access).
template <typename T, typename I>
__global__ void group_normalise_kernel(const T* x, const float2* stats, const T* weight, const T* bias, T* out, I n,
                                       int channels, int per) {
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x)) {
    const int c = static_cast<int>(i % channels);
    const float2 s = stats[c / per];
    out[i] = from_float<T>((to_float(x[i]) - s.x) * s.y * to_float(weight[c]) + to_float(bias[c]));
  }
}

template <typename T>
__global__ void silu_kernel(const T* x, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float v = to_float(x[i]);
    out[i] = from_float<T>(v / (1.0f + expf(-v)));
  }
}

template <typename T>
__global__ void tanh_kernel(const T* x, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = from_float<T>(tanhf(to_float(x[i])));
  }
}

template <typename T, typename I>
__global__ void upsample2x_kernel(const T* x, T* out, I n, int w, int c) {
  const I out_row = I{2} * w * c;
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x)) {
    const I oy = i / out_row;
    const I rem = i - oy * out_row;
    const I ox = rem / c, ch = rem - ox * c;
    out[i] = x[((oy / 2) * w + ox / 2) * c + ch];
  }
}

// One thread per pair (t, head, j); the angle tables may be float32 while x is 16-bit.
template <typename T, typename A>
__global__ void rotate_pairs_kernel(T* x, const A* cos, const A* sin, int64_t pairs, int heads, int half) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < pairs; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / (int64_t{heads} * half);
    const int j = static_cast<int>(i % half);
    const float re = to_float(x[2 * i]), im = to_float(x[2 * i + 1]);
    const float c = to_float(cos[t * half + j]), s = to_float(sin[t * half + j]);
    x[2 * i] = from_float<T>(re * c - im * s);
    x[2 * i + 1] = from_float<T>(re * s + im * c);
  }
}

template <typename T>
__global__ void mul_columns_kernel(const T* x, const T* scale, T* out, int64_t n, int64_t d) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = from_float<T>(to_float(x[i]) * to_float(scale[i % d]));
  }
}

}  // namespace

void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int padding, int stride, Tensor& out) {
  const int64_t in_h = x.dim(0), in_w = x.dim(1), c_in = x.dim(2);
  const int64_t c_out = weight.dim(0), k = weight.dim(2);
  const int64_t out_w = out.dim(1), pixels = out.dim(0) * out_w;
  if (pixels == 0 || c_out == 0) return;
  const int64_t width = c_in * k * k;
  const Tensor flat_weight = weight.reshape({c_out, width});
  Tensor flat_out = out.reshape({pixels, c_out});
  if (k == 1 && padding == 0 && stride == 1) {
    linear(x.reshape({pixels, c_in}), flat_weight, bias, flat_out);
    return;
  }
  // A tile is at most kScratchElements (far below 2^30), so the unfolding indexes it in int32.
  const int64_t tile = std::max<int64_t>(1, std::min(pixels, kScratchElements / width));
  cudaStream_t stream = stream_of(out);
  Tensor reordered = Tensor::empty({c_out, width}, weight.dtype(), weight.device());
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    reorder_conv_weight_kernel<T><<<blocks_for(reordered.numel(), kThreads), kThreads, 0, stream>>>(
        ptr<T>(weight), ptr<T>(reordered), reordered.numel(), static_cast<int>(c_in), static_cast<int>(k * k));
  });
  check_launch("reorder_conv_weight_kernel", out);
  Tensor cols = Tensor::empty({tile, width}, x.dtype(), x.device());
  for (int64_t first = 0; first < pixels; first += tile) {
    const int64_t n = std::min(tile, pixels - first);
    Tensor unfolded = cols.slice_rows(0, n);
    with_float_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      constexpr int kVec = 16 / sizeof(T);
      const bool vector = c_in % kVec == 0 && aligned16(x.raw()) && aligned16(unfolded.raw());
      const int64_t threads = n * k * k * (vector ? c_in / kVec : c_in);
      const auto args = std::make_tuple(ptr<T>(x), ptr<T>(unfolded), first, static_cast<int>(n), static_cast<int>(in_h),
                                        static_cast<int>(in_w), static_cast<int>(c_in), static_cast<int>(k), padding, stride,
                                        static_cast<int>(out_w));
      if (vector) {
        std::apply(
            [&](auto... a) { unfold2d_kernel<T, kVec><<<blocks_for(threads, kThreads), kThreads, 0, stream>>>(a...); },
            args);
      } else {
        std::apply(
            [&](auto... a) { unfold2d_kernel<T, 1><<<blocks_for(threads, kThreads), kThreads, 0, stream>>>(a...); },
            args);
      }
    });
    check_launch("unfold2d_kernel", out);
    Tensor dst = flat_out.slice_rows(first, first + n);
    linear(unfolded, reordered, bias, dst);
  }
}

void group_norm(const Tensor& x, int groups, const Tensor& weight, const Tensor& bias, float eps, Tensor& out) {
  const int64_t rows = x.dim(0), channels = x.dim(1), per = channels / groups;
  if (rows == 0 || channels == 0) return;
  const int64_t chunks = (rows + kNormChunkRows - 1) / kNormChunkRows;
  // double2 partials [chunks, channels], then float2 stats [groups], as one scratch buffer.
  const int64_t partial_bytes = chunks * channels * static_cast<int64_t>(sizeof(double2));
  Tensor scratch =
      Tensor::empty({(partial_bytes + groups * static_cast<int64_t>(sizeof(float2))) / 8}, DType::kI64, x.device());
  auto* partial = static_cast<double2*>(scratch.raw());
  auto* stats = reinterpret_cast<float2*>(static_cast<char*>(scratch.raw()) + partial_bytes);
  cudaStream_t stream = stream_of(out);
  const int sum_threads = static_cast<int>(std::min<int64_t>(kThreads, (channels + 31) / 32 * 32));
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    channel_sums_kernel<T><<<static_cast<unsigned>(chunks), sum_threads, 0, stream>>>(ptr<T>(x), partial, rows,
                                                                                      static_cast<int>(channels));
  });
  check_launch("channel_sums_kernel", out);
  group_stats_kernel<<<static_cast<unsigned>(groups), kThreads, 0, stream>>>(
      partial, stats, chunks, static_cast<int>(channels), static_cast<int>(per), rows, eps);
  check_launch("group_stats_kernel", out);
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (out.numel() < (int64_t{1} << 30)) {  // i + the grid stride stays below 2^31
      group_normalise_kernel<T, int32_t><<<blocks_for(out.numel(), kThreads), kThreads, 0, stream>>>(
          ptr<T>(x), stats, ptr<T>(weight), ptr<T>(bias), ptr<T>(out), static_cast<int32_t>(out.numel()),
          static_cast<int>(channels), static_cast<int>(per));
    } else {
      group_normalise_kernel<T, int64_t><<<blocks_for(out.numel(), kThreads), kThreads, 0, stream>>>(
          ptr<T>(x), stats, ptr<T>(weight), ptr<T>(bias), ptr<T>(out), out.numel(), static_cast<int>(channels),
          static_cast<int>(per));
    }
  });
  check_launch("group_normalise_kernel", out);
}

void silu(const Tensor& x, Tensor& out) {
  if (out.numel() == 0) return;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    silu_kernel<T>
        <<<blocks_for(out.numel(), kThreads), kThreads, 0, stream_of(out)>>>(ptr<T>(x), ptr<T>(out), out.numel());
  });
  check_launch("silu_kernel", out);
}

void tanh(const Tensor& x, Tensor& out) {
  if (out.numel() == 0) return;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    tanh_kernel<T>
        <<<blocks_for(out.numel(), kThreads), kThreads, 0, stream_of(out)>>>(ptr<T>(x), ptr<T>(out), out.numel());
  });
  check_launch("tanh_kernel", out);
}

void upsample_nearest2x(const Tensor& x, Tensor& out) {
  if (out.numel() == 0) return;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int w = static_cast<int>(x.dim(1)), c = static_cast<int>(x.dim(2));
    if (out.numel() < (int64_t{1} << 30)) {  // i + the grid stride stays below 2^31
      upsample2x_kernel<T, int32_t><<<blocks_for(out.numel(), kThreads), kThreads, 0, stream_of(out)>>>(
          ptr<T>(x), ptr<T>(out), static_cast<int32_t>(out.numel()), w, c);
    } else {
      upsample2x_kernel<T, int64_t><<<blocks_for(out.numel(), kThreads), kThreads, 0, stream_of(out)>>>(
          ptr<T>(x), ptr<T>(out), out.numel(), w, c);
    }
  });
  check_launch("upsample2x_kernel", out);
}

void rotate_pairs(Tensor& x, const Tensor& cos, const Tensor& sin) {
  const int64_t pairs = x.numel() / 2;
  if (pairs == 0) return;
  const int heads = static_cast<int>(x.dim(1)), half = static_cast<int>(x.dim(2) / 2);
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (cos.dtype() == DType::kF32) {
      rotate_pairs_kernel<T, float><<<blocks_for(pairs, kThreads), kThreads, 0, stream_of(x)>>>(
          ptr<T>(x), ptr<float>(cos), ptr<float>(sin), pairs, heads, half);
    } else {
      rotate_pairs_kernel<T, T><<<blocks_for(pairs, kThreads), kThreads, 0, stream_of(x)>>>(
          ptr<T>(x), ptr<T>(cos), ptr<T>(sin), pairs, heads, half);
    }
  });
  check_launch("rotate_pairs_kernel", x);
}

void mul_columns(const Tensor& x, const Tensor& scale, Tensor& out) {
  if (out.numel() == 0) return;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    mul_columns_kernel<T><<<blocks_for(out.numel(), kThreads), kThreads, 0, stream_of(out)>>>(
        ptr<T>(x), ptr<T>(scale), ptr<T>(out), out.numel(), x.dim(-1));
  });
  check_launch("mul_columns_kernel", out);
}

}  // namespace omni::tensor::cuda
