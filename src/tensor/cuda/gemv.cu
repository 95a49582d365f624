// The few-row product out[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) of a decode step, where
// the weight is read once and the rows of x ride along: a product of one to kGemvMaxRows rows
// is bound by reading the weight, which cuBLASLt's tile kernels do at a quarter of the memory
// bandwidth for some such shapes (docs/performance.md, "Few-row products: gemv against cuBLASLt").
//
// Work split: a block of kThreads threads owns kCols * (kThreads / group) consecutive weight rows
// (output columns); each `group` of threads (a multiple of a warp) owns kCols of them and strides
// over K in 16-byte chunks, so every weight byte is loaded once, with one vector load, and each x
// chunk it pairs with is loaded and widened once for the kCols rows. K is split inside the block
// only (the group size grows while the grid is too small to fill the device), so the sums are
// reduced in a fixed order through shared memory: deterministic, no workspace, nothing to
// synchronise with the host, hence graph-capturable.
//
// Fused forms (GemvFusion) take a decode layer's neighbouring elementwise kernels into the same
// launch, each with the arithmetic and rounding of the kernel it replaces, so that a fused product
// gives the bits of the unfused sequence: the RMSNorm of x in the prologue (every block recomputes
// the rows' sums of squares in the order of rms_norm_vector_kernel: x is a few KiB, read from L2),
// SiLU-and-multiply of a gate/up row pair in the prologue, and the residual add in the epilogue
// (out += the product rounded to T; each output element has one owning thread).
#include <algorithm>
#include <cstdint>

#include "tensor/cuda/common.cuh"
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/vector_load.cuh"

namespace omni::tensor::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Columns per thread: more rows of x make each widened x chunk worth sharing among more columns.
template <int M>
constexpr int kColsPerThread = M > 4 ? 4 : 2;

// Chunks per thread whose loads are issued before the first of them is used (registers allow
// fewer as the accumulators grow).
template <int M>
constexpr int kLoadsAhead = M > 4 ? 2 : 4;

__device__ __forceinline__ float silu_times(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }

// 1 / rms of each of the M rows of x [M, chunks] as rms_norm_vector_kernel computes it with
// `norm_threads` threads: thread t sums its chunks t, t + norm_threads, ... element by element, then
// the warps' sums and the sum of those in the same butterfly order. One warp finishes each row.
template <typename T, int M>
__device__ void inverse_rms(const uint4* xs, int chunks, int norm_threads, float eps, float (&inv)[M]) {
  constexpr int kElems = Chunk<T>::kElems;
  static_assert(M <= kWarps, "one warp finishes each row");
  __shared__ float warp_sums[M][32];
  __shared__ float scales[M];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int m = 0; m < M; ++m) {
    // norm_threads is a multiple of 32: whole warps take each iteration.
    for (int t = threadIdx.x; t < norm_threads; t += kThreads) {
      float sum = 0.0f;
      for (int c = t; c < chunks; c += norm_threads) {
        float v[kElems];
        widen(__ldg(xs + static_cast<int64_t>(m) * chunks + c), v, T{});
#pragma unroll
        for (int e = 0; e < kElems; ++e) sum += v[e] * v[e];
      }
      sum = warp_sum(sum);
      if (lane == 0) warp_sums[m][t / 32] = sum;
    }
  }
  __syncthreads();
  if (warp < M) {
    float v = lane < norm_threads / 32 ? warp_sums[warp][lane] : 0.0f;
    v = warp_sum(v);
    if (lane == 0) scales[warp] = rsqrtf(v / static_cast<float>(int64_t{chunks} * kElems) + eps);
  }
  __syncthreads();
#pragma unroll
  for (int m = 0; m < M; ++m) inv[m] = scales[m];
}

template <typename T>
__device__ __forceinline__ float round_to(float v) {
  return to_float(from_float<T>(v));
}

template <typename T, int M, GemvFusion F>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                const T* __restrict__ norm_weight, float eps, int norm_threads, T* __restrict__ out, int n, int chunks,
                int group) {
  constexpr int kCols = kColsPerThread<M>;
  constexpr int kAhead = kLoadsAhead<M>;
  constexpr int kElems = Chunk<T>::kElems;
  constexpr bool kNorm = F == GemvFusion::kRmsNorm, kSilu = F == GemvFusion::kSiluAndMulAccumulate;
  constexpr bool kAccumulate = F == GemvFusion::kAccumulate || kSilu;
  // A row of x holds gate then up for SiLU-and-multiply: twice the chunks of a weight row.
  constexpr int kXStride = kSilu ? 2 : 1;
  __shared__ float partial[kWarps][M][kCols];

  const int groups = kThreads / group;
  const int g = threadIdx.x / group, lane = threadIdx.x % group;
  const int64_t first_col = (static_cast<int64_t>(blockIdx.x) * groups + g) * kCols;
  const uint4* rows[kCols];
#pragma unroll
  for (int j = 0; j < kCols; ++j) {
    // Columns past n read the last row (valid memory) and are never written.
    const int64_t col = first_col + j < n ? first_col + j : n - 1;
    rows[j] = reinterpret_cast<const uint4*>(w) + col * chunks;
  }
  const uint4* xs = reinterpret_cast<const uint4*>(x);
  const uint4* norm_chunks = reinterpret_cast<const uint4*>(norm_weight);
  float inv[M];
  if constexpr (kNorm) inverse_rms<T, M>(xs, chunks, norm_threads, eps, inv);

  float acc[M][kCols];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int j = 0; j < kCols; ++j) acc[m][j] = 0.0f;

  if (first_col < n) {
    for (int base = lane; base < chunks; base += kAhead * group) {
      uint4 wv[kAhead][kCols];
#pragma unroll
      for (int u = 0; u < kAhead; ++u)
#pragma unroll
        for (int j = 0; j < kCols; ++j)
          wv[u][j] = load_streaming(rows[j] + base + u * group, base + u * group < chunks);
#pragma unroll
      for (int u = 0; u < kAhead; ++u) {
        const int c = base + u * group;
        if (c >= chunks) break;
        float wf[kCols][kElems];
#pragma unroll
        for (int j = 0; j < kCols; ++j) widen(wv[u][j], wf[j], T{});
        float nw[kElems];
        if constexpr (kNorm) widen(__ldg(norm_chunks + c), nw, T{});
#pragma unroll
        for (int m = 0; m < M; ++m) {
          float xf[kElems];
          const uint4* row = xs + static_cast<int64_t>(m) * kXStride * chunks;
          widen(__ldg(row + c), xf, T{});
          if constexpr (kNorm) {
#pragma unroll
            for (int e = 0; e < kElems; ++e) xf[e] = round_to<T>(xf[e] * inv[m] * nw[e]);
          }
          if constexpr (kSilu) {
            float up[kElems];
            widen(__ldg(row + chunks + c), up, T{});
#pragma unroll
            for (int e = 0; e < kElems; ++e) xf[e] = round_to<T>(silu_times(xf[e], up[e]));
          }
#pragma unroll
          for (int j = 0; j < kCols; ++j)
#pragma unroll
            for (int e = 0; e < kElems; ++e) acc[m][j] = fmaf(xf[e], wf[j][e], acc[m][j]);
        }
      }
    }
  }

  const int warp = threadIdx.x / 32;
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const float sum = warp_sum(acc[m][j]);
      if (threadIdx.x % 32 == 0) partial[warp][m][j] = sum;
    }
  __syncthreads();

  // One thread per (local column, row): the group's warps in order, then the bias.
  const int block_cols = groups * kCols;
  if (threadIdx.x < block_cols * M) {
    const int local = threadIdx.x % block_cols, m = threadIdx.x / block_cols;
    const int64_t col = static_cast<int64_t>(blockIdx.x) * block_cols + local;
    if (col < n) {
      const int warps_per_group = group / 32, first_warp = (local / kCols) * warps_per_group;
      float sum = 0.0f;
      for (int i = 0; i < warps_per_group; ++i) sum += partial[first_warp + i][m][local % kCols];
      if (bias != nullptr) sum += to_float(bias[col]);
      T* dst = out + static_cast<int64_t>(m) * n + col;
      if constexpr (kAccumulate) {
        *dst = from_float<T>(to_float(*dst) + round_to<T>(sum));
      } else {
        *dst = from_float<T>(sum);
      }
    }
  }
}

// Threads per group of columns: the smallest warp multiple that gives the device about two
// blocks per multiprocessor, without leaving a thread fewer than two chunks of its row.
int group_size(int64_t n, int64_t chunks, int cols, int multiprocessors) {
  int group = 32;
  const auto blocks = [&](int g) { return (n + int64_t{kThreads / g} * cols - 1) / (int64_t{kThreads / g} * cols); };
  while (group < kThreads && blocks(group) < 2 * multiprocessors && int64_t{group} * 4 <= chunks) group *= 2;
  return group;
}

// The thread count rms_norm's vector kernel (cuda/elementwise.cu) gives a row of `chunks` chunks.
int rms_norm_threads(int64_t chunks) {
  return static_cast<int>(std::clamp<int64_t>((chunks + 31) / 32 * 32, 32, 1024));
}

template <typename T, int M, GemvFusion F>
void launch(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& norm_weight, float eps, Tensor& out) {
  constexpr int kCols = kColsPerThread<M>;
  const int device = out.device().index;
  const int64_t n = w.dim(0), chunks = w.dim(1) / Chunk<T>::kElems;
  const int group = group_size(n, chunks, kCols, multiprocessor_count(device));
  const int64_t block_cols = int64_t{kThreads / group} * kCols;
  const auto blocks = static_cast<unsigned>((n + block_cols - 1) / block_cols);
  gemv_kernel<T, M, F><<<blocks, kThreads, 0, stream_for(device)>>>(
      ptr<T>(x), ptr<T>(w), bias.defined() ? ptr<T>(bias) : nullptr,
      norm_weight.defined() ? ptr<T>(norm_weight) : nullptr, eps, rms_norm_threads(chunks), ptr<T>(out),
      static_cast<int>(n), static_cast<int>(chunks), group);
}

template <typename T, GemvFusion F, int M = 1>
void launch_rows(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& norm_weight, float eps,
                 Tensor& out) {
  if constexpr (M < kGemvMaxRows) {
    if (x.dim(0) != M) return launch_rows<T, F, M + 1>(x, w, bias, norm_weight, eps, out);
  }
  launch<T, M, F>(x, w, bias, norm_weight, eps, out);
}

template <typename T>
void launch_fusion(GemvFusion fusion, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& norm_weight,
                   float eps, Tensor& out) {
  switch (fusion) {
    case GemvFusion::kNone:
      return launch_rows<T, GemvFusion::kNone>(x, w, bias, norm_weight, eps, out);
    case GemvFusion::kRmsNorm:
      return launch_rows<T, GemvFusion::kRmsNorm>(x, w, bias, norm_weight, eps, out);
    case GemvFusion::kAccumulate:
      return launch_rows<T, GemvFusion::kAccumulate>(x, w, bias, norm_weight, eps, out);
    case GemvFusion::kSiluAndMulAccumulate:
      return launch_rows<T, GemvFusion::kSiluAndMulAccumulate>(x, w, bias, norm_weight, eps, out);
  }
}

}  // namespace

bool gemv_supports(const Tensor& x, const Tensor& w) {
  const int64_t elems_per_chunk = 16 / static_cast<int64_t>(dtype_size(w.dtype()));
  const int64_t m = x.dim(0), n = w.dim(0), k = w.dim(1);
  return m >= 1 && m <= kGemvMaxRows && n >= 1 && k >= 1 && k % elems_per_chunk == 0 &&
         k / elems_per_chunk <= INT32_MAX && n <= INT32_MAX && aligned16(x.raw()) && aligned16(w.raw());
}

bool gemv_supports(GemvFusion fusion, const Tensor& x, const Tensor& w, const Tensor& norm_weight) {
  return gemv_supports(x, w) && (fusion != GemvFusion::kRmsNorm || aligned16(norm_weight.raw()));
}

void gemv(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  gemv(GemvFusion::kNone, x, w, bias, Tensor(), 0.0f, out);
}

void gemv(GemvFusion fusion, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& norm_weight, float eps,
          Tensor& out) {
  with_float_type(x.dtype(),
                  [&](auto tag) { launch_fusion<decltype(tag)>(fusion, x, w, bias, norm_weight, eps, out); });
  check_launch("gemv_kernel", out);
}

}  // namespace omni::tensor::cuda
