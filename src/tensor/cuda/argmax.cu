// argmax (ops.h) on the GPU: the greedy pick over a vocabulary, one of the longest rows a decode
// step reduces (151,936 logits for Qwen3). One block per row is bound by one SM's latency (260 µs a
// row on the H200), so the row is split: the first kernel gives each block of a (slice, row) grid
// kSliceElements consecutive logits, read with 16-byte loads where the row allows, and writes the
// slice's best (value, index) candidate; the second reduces a row's slice candidates in slice
// order. Ties go to the lower index at every level and NaN never wins, so the pick is the one-block
// kernel's, bit for bit, and independent of the split. No host work between the launches, so the
// pair can be captured in a CUDA graph.
#include <cstdint>

#include "tensor/cuda/common.cuh"
#include "tensor/cuda/kernels.h"

namespace omni::tensor::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kSliceElements = 2048;  // a block's share of the row: 8 KiB of float32, 4 of bf16

template <typename T>
__device__ __forceinline__ void consider(T value, int64_t index, Candidate& best) {
  const Candidate c{to_float(value), static_cast<int32_t>(index)};
  if (before(c, best)) best = c;
}

// Best of each slice: `vector` when every row starts on 16 bytes, so a thread takes whole chunks.
template <typename T, bool kVector>
__global__ void __launch_bounds__(kThreads)
    argmax_slices_kernel(const T* x, int64_t n, int slices, Candidate* partial) {
  __shared__ Candidate scratch[32];
  const int64_t row = blockIdx.y, begin = blockIdx.x * kSliceElements;
  const int64_t end = min(n, begin + kSliceElements);
  const T* values = x + row * n;
  Candidate best{-INFINITY, INT32_MAX};
  if constexpr (kVector) {
    constexpr int kPer = 16 / sizeof(T);
    for (int64_t i = begin + threadIdx.x * kPer; i < end; i += kThreads * kPer) {
      if (i + kPer <= end) {
        const uint4 chunk = __ldg(reinterpret_cast<const uint4*>(values + i));
        const T* elems = reinterpret_cast<const T*>(&chunk);
#pragma unroll
        for (int e = 0; e < kPer; ++e) consider(elems[e], i + e, best);
      } else {
        for (int64_t e = i; e < end; ++e) consider(values[e], e, best);
      }
    }
  } else {
    for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) consider(values[i], i, best);
  }
  best = block_best(best, scratch);
  if (threadIdx.x == 0) partial[row * slices + blockIdx.x] = best;
}

// One warp per row: the row's slice candidates, lane-strided, then the warp's best.
__global__ void argmax_rows_kernel(const Candidate* partial, int slices, int32_t* out) {
  const Candidate* row = partial + int64_t{blockIdx.x} * slices;
  Candidate best{-INFINITY, INT32_MAX};
  for (int s = threadIdx.x; s < slices; s += 32) {
    if (before(row[s], best)) best = row[s];
  }
  best = warp_best(best);
  if (threadIdx.x == 0) out[blockIdx.x] = best.index;
}

}  // namespace

void argmax(const Tensor& x, Tensor& out) {
  const int64_t rows = x.dim(0), n = x.dim(1);
  if (rows == 0) return;
  const int slices = static_cast<int>((n + kSliceElements - 1) / kSliceElements);
  Tensor partial = Tensor::empty({rows * slices * 2}, DType::kI32, x.device());  // (value, index) pairs
  auto* candidates = static_cast<Candidate*>(partial.raw());
  cudaStream_t stream = stream_for(x.device().index);
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const bool vector = aligned16(x.raw()) && (n * static_cast<int64_t>(sizeof(T))) % 16 == 0;
    const dim3 grid(static_cast<unsigned>(slices), static_cast<unsigned>(rows));
    if (vector) {
      argmax_slices_kernel<T, true><<<grid, kThreads, 0, stream>>>(ptr<T>(x), n, slices, candidates);
    } else {
      argmax_slices_kernel<T, false><<<grid, kThreads, 0, stream>>>(ptr<T>(x), n, slices, candidates);
    }
  });
  check_launch("argmax_slices_kernel", out);
  argmax_rows_kernel<<<static_cast<unsigned>(rows), 32, 0, stream>>>(candidates, slices, ptr<int32_t>(out));
  check_launch("argmax_rows_kernel", out);
}

}  // namespace omni::tensor::cuda
