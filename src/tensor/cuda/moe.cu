// The mixture-of-experts kernels behind tensor/moe_ops.h, all on the device with no host
// synchronisation, so that a MoE layer can sit in a recorded decode step:
//
//   moe_route_kernel: one block per token; the router's logits as float32, softmax, then top_k
//     rounds of a block-wide arg-max (larger probability first, ties to the lower index, the
//     order of model/moe_mlp.cc's host router), the kept probabilities renormalised in choice order.
//   moe_group_kernel: one block for the whole batch: counts per expert in shared memory, their
//     prefix sums (offsets), then each (token, choice) pair claims a grouped row of its expert with a
//     shared atomic. The order of rows inside an expert's range is therefore not fixed, but every
//     product below computes a row the same way wherever it sits, so results do not depend on it.
//   expert_rows_kernel: the few-row product (decode): block (column tile, y) serves the y-th expert
//     that has rows, streams that expert's weight rows once per group of up to R rows with 16-byte
//     loads and float32 accumulation, one warp per four output columns, reduced in a fixed order.
//   grouped_tile_kernel: the many-row product (prefill, bfloat16/float16): 64 x 64 output tiles on
//     the tensor cores (WMMA 16x16x16, float32 accumulation), each tile inside one expert's rows;
//     block y finds its expert and tile from the offsets, so the grid (an upper bound on the
//     tiles: ceil(rows / 64) + experts) is fixed by the shapes.
// Both products gather their input rows through `rows` (x[rows[p]]) when it is given, which saves
// copying the tokens into expert order first.
#include <mma.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cstdint>

#include "tensor/cuda/common.cuh"
#include "tensor/cuda/moe_kernels.h"
#include "tensor/cuda/vector_load.cuh"

namespace omni::tensor::cuda {
namespace {

constexpr int kRouteThreads = 128;
constexpr int kMaxTopK = 64;
constexpr int kGroupThreads = 1024;

template <typename T>
__global__ void __launch_bounds__(kRouteThreads)
    moe_route_kernel(const T* __restrict__ logits, int num_experts, int top_k, bool norm_topk_prob,
                     int32_t* __restrict__ experts, T* __restrict__ weights) {
  extern __shared__ float probs[];  // [num_experts]
  __shared__ float scratch[32];
  __shared__ Candidate best_scratch[32];
  __shared__ float chosen_p[kMaxTopK];
  __shared__ int32_t chosen_e[kMaxTopK];
  const int64_t t = blockIdx.x;
  const T* row = logits + t * num_experts;
  float top = -FLT_MAX;
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
    const float v = to_float(row[e]);
    probs[e] = v;
    top = fmaxf(top, v);
  }
  top = block_max(top, scratch);
  float sum = 0.0f;
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
    const float p = expf(probs[e] - top);
    probs[e] = p;
    sum += p;
  }
  sum = block_sum(sum, scratch);
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) probs[e] = probs[e] / sum;
  __syncthreads();
  for (int j = 0; j < top_k; ++j) {
    Candidate c{-INFINITY, INT32_MAX};
    for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
      const Candidate o{probs[e], e};
      if (before(o, c)) c = o;
    }
    c = block_best(c, best_scratch);
    if (threadIdx.x == 0) {
      // Only non-finite logits leave no candidate; the choice is then any in-range expert.
      const int32_t e = c.index >= 0 && c.index < num_experts ? c.index : j % num_experts;
      chosen_e[j] = e;
      chosen_p[j] = c.index == e ? c.value : probs[e];
      probs[e] = -INFINITY;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    float kept = 0.0f;
    for (int j = 0; j < top_k; ++j) kept += chosen_p[j];
    for (int j = 0; j < top_k; ++j) {
      experts[t * top_k + j] = chosen_e[j];
      weights[t * top_k + j] = from_float<T>(norm_topk_prob ? chosen_p[j] / kept : chosen_p[j]);
    }
  }
}

__device__ __forceinline__ int32_t clamp_expert(int32_t e, int num_experts) {
  return e < 0 ? 0 : (e >= num_experts ? num_experts - 1 : e);
}

__global__ void __launch_bounds__(kGroupThreads)
    moe_group_kernel(const int32_t* __restrict__ experts, int64_t pairs, int top_k, int num_experts,
                     int32_t* __restrict__ offsets, int32_t* __restrict__ rows, int32_t* __restrict__ index) {
  extern __shared__ int32_t counts[];  // [num_experts] counts, then [num_experts] cursors
  int32_t* cursor = counts + num_experts;
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < pairs; i += blockDim.x)
    atomicAdd(&counts[clamp_expert(experts[i], num_experts)], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t run = 0;
    for (int e = 0; e < num_experts; ++e) {
      offsets[e] = run;
      cursor[e] = run;
      run += counts[e];
    }
    offsets[num_experts] = run;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int32_t p = atomicAdd(&cursor[clamp_expert(experts[i], num_experts)], 1);
    rows[p] = static_cast<int32_t>(i / top_k);
    index[i] = p;
  }
}

// The unit of work `y` when expert e's rows [offsets[e], offsets[e + 1]) make ceil(count / unit)
// units, in expert order: the expert (-1 past the last unit), the unit's index within it and the
// expert's rows. Offsets are clamped to [0, pairs]. Warp 0 scans the experts 32 at a time; every
// thread of the block gets the answer (the call synchronises the block twice).
struct Unit {
  int expert, sub, begin, end;
};

__device__ Unit find_unit(const int32_t* __restrict__ offsets, int num_experts, int64_t pairs, int unit, int y) {
  __shared__ Unit found;
  if (threadIdx.x == 0) found = Unit{-1, 0, 0, 0};
  __syncthreads();
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    const auto clamp = [&](int32_t v) { return static_cast<int>(v < 0 ? 0 : (v > pairs ? pairs : v)); };
    int done = 0;
    for (int base = 0; base < num_experts; base += 32) {
      const int e = base + lane;
      const int lo = e < num_experts ? clamp(offsets[e]) : 0, hi = e < num_experts ? clamp(offsets[e + 1]) : 0;
      const int count = hi > lo ? hi - lo : 0;
      const int units = count > 0 ? (count - 1) / unit + 1 : 0;
      int inclusive = units;
      for (int d = 1; d < 32; d <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, inclusive, d);
        if (lane >= d) inclusive += v;
      }
      const int first = done + inclusive - units;
      if (units > 0 && y >= first && y < first + units) found = Unit{e, y - first, lo, hi};
      done += __shfl_sync(0xffffffffu, inclusive, 31);
      if (done > y) break;
    }
  }
  __syncthreads();
  return found;
}

constexpr int kRowsThreads = 256;
constexpr int kRowsWarps = kRowsThreads / 32;
constexpr int kRowsCols = 4;   // output columns per warp
constexpr int kRowsAhead = 2;  // chunk loads per column issued before the first is used

template <typename T, int R>
__global__ void __launch_bounds__(kRowsThreads)
    expert_rows_kernel(const T* __restrict__ x, const int32_t* __restrict__ rows, int64_t x_rows,
                       const T* __restrict__ w, const int32_t* __restrict__ offsets, int num_experts, int64_t pairs,
                       T* __restrict__ out, int n_out, int chunks) {
  constexpr int kElems = Chunk<T>::kElems;
  const Unit u = find_unit(offsets, num_experts, pairs, INT_MAX, blockIdx.y);
  if (u.expert < 0) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col0 = (blockIdx.x * kRowsWarps + warp) * kRowsCols;
  if (col0 >= n_out) return;  // no block-wide synchronisation follows
  const int64_t k = int64_t{chunks} * kElems;
  const uint4* wr[kRowsCols];
#pragma unroll
  for (int j = 0; j < kRowsCols; ++j) {
    const int col = col0 + j < n_out ? col0 + j : n_out - 1;
    wr[j] = reinterpret_cast<const uint4*>(w + (int64_t{u.expert} * n_out + col) * k);
  }
  for (int r0 = u.begin; r0 < u.end; r0 += R) {
    const int nr = u.end - r0 < R ? u.end - r0 : R;
    const uint4* xr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int p = r0 + (r < nr ? r : nr - 1);
      int64_t src = rows != nullptr ? rows[p] : p;
      src = src < 0 ? 0 : (src >= x_rows ? x_rows - 1 : src);
      xr[r] = reinterpret_cast<const uint4*>(x + src * k);
    }
    float acc[R][kRowsCols];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int j = 0; j < kRowsCols; ++j) acc[r][j] = 0.0f;
    for (int base = lane; base < chunks; base += 32 * kRowsAhead) {
      uint4 wv[kRowsAhead][kRowsCols];
#pragma unroll
      for (int a = 0; a < kRowsAhead; ++a)
#pragma unroll
        for (int j = 0; j < kRowsCols; ++j) wv[a][j] = load_streaming(wr[j] + base + a * 32, base + a * 32 < chunks);
#pragma unroll
      for (int a = 0; a < kRowsAhead; ++a) {
        const int c = base + a * 32;
        if (c >= chunks) break;
        float wf[kRowsCols][kElems];
#pragma unroll
        for (int j = 0; j < kRowsCols; ++j) widen(wv[a][j], wf[j], T{});
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r >= nr) break;
          float xf[kElems];
          widen(__ldg(xr[r] + c), xf, T{});
#pragma unroll
          for (int j = 0; j < kRowsCols; ++j)
#pragma unroll
            for (int e = 0; e < kElems; ++e) acc[r][j] = fmaf(xf[e], wf[j][e], acc[r][j]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= nr) break;
#pragma unroll
      for (int j = 0; j < kRowsCols; ++j) {
        const float sum = warp_sum(acc[r][j]);
        if (lane == 0 && col0 + j < n_out) out[int64_t{r0 + r} * n_out + col0 + j] = from_float<T>(sum);
      }
    }
  }
}

constexpr int kTileM = 64, kTileN = 64, kTileK = 32, kTileThreads = 128, kTilePad = 8;

template <typename T>
__global__ void __launch_bounds__(kTileThreads)
    grouped_tile_kernel(const T* __restrict__ x, const int32_t* __restrict__ rows, int64_t x_rows,
                        const T* __restrict__ w, const int32_t* __restrict__ offsets, int num_experts, int64_t pairs,
                        T* __restrict__ out, int n_out, int k) {
  namespace wmma = nvcuda::wmma;
  __shared__ __align__(128) T as[kTileM][kTileK + kTilePad];
  __shared__ __align__(128) T bs[kTileN][kTileK + kTilePad];
  __shared__ __align__(128) float cs[kTileM][kTileN + 4];
  const Unit u = find_unit(offsets, num_experts, pairs, kTileM, blockIdx.y);
  if (u.expert < 0) return;
  const int m0 = u.begin + u.sub * kTileM, n0 = blockIdx.x * kTileN;
  const int tid = threadIdx.x;
  // Each thread moves two 16-byte chunks of A and two of B per K step: chunk c is row c / 4, columns
  // (c % 4) * 8 .. + 8.
  const T* a_src[2];
  const T* b_src[2];
  bool a_valid[2];
  int row_of[2], col_of[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int c = tid + i * kTileThreads;
    row_of[i] = c / 4;
    col_of[i] = (c % 4) * 8;
    const int p = m0 + row_of[i];
    a_valid[i] = p < u.end;
    int64_t src = a_valid[i] ? (rows != nullptr ? rows[p] : p) : 0;
    src = src < 0 ? 0 : (src >= x_rows ? x_rows - 1 : src);
    a_src[i] = x + src * k + col_of[i];
    b_src[i] = w + (int64_t{u.expert} * n_out + n0 + row_of[i]) * k + col_of[i];
  }
  uint4 a_reg[2], b_reg[2];
  const auto load = [&](int k0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      a_reg[i] = a_valid[i] ? __ldg(reinterpret_cast<const uint4*>(a_src[i] + k0)) : make_uint4(0, 0, 0, 0);
      b_reg[i] = load_streaming(reinterpret_cast<const uint4*>(b_src[i] + k0), true);
    }
  };
  const int warp = tid / 32, wm = warp / 2, wn = warp % 2;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  load(0);
  for (int k0 = 0; k0 < k; k0 += kTileK) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      *reinterpret_cast<uint4*>(&as[row_of[i]][col_of[i]]) = a_reg[i];
      *reinterpret_cast<uint4*>(&bs[row_of[i]][col_of[i]]) = b_reg[i];
    }
    __syncthreads();
    if (k0 + kTileK < k) load(k0 + kTileK);
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> af[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bf[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(af[i], &as[wm * 32 + i * 16][kk], kTileK + kTilePad);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(bf[j], &bs[wn * 32 + j * 16][kk], kTileK + kTilePad);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], af[i], bf[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(&cs[wm * 32 + i * 16][wn * 32 + j * 16], acc[i][j], kTileN + 4, wmma::mem_row_major);
  __syncthreads();
  // 64 rows of 8 chunks of 8 outputs: four chunks per thread.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int c = tid + i * kTileThreads, r = c / 8, cc = (c % 8) * 8;
    if (m0 + r >= u.end) continue;
    alignas(16) T packed[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) packed[e] = from_float<T>(cs[r][cc + e]);
    *reinterpret_cast<uint4*>(out + int64_t{m0 + r} * n_out + n0 + cc) = *reinterpret_cast<const uint4*>(packed);
  }
}

template <typename T, int R = 1>
void launch_rows(const Tensor& x, const Tensor& rows, const Tensor& w, const Tensor& offsets, int64_t group_rows,
                 Tensor& out) {
  if constexpr (R < 8) {
    if (group_rows > R) return launch_rows<T, R * 2>(x, rows, w, offsets, group_rows, out);
  }
  const int64_t pairs = out.dim(0), n_out = out.dim(1), experts = offsets.numel() - 1;
  const int chunks = static_cast<int>(w.dim(1) / Chunk<T>::kElems);
  const int64_t block_cols = int64_t{kRowsWarps} * kRowsCols;
  const dim3 grid(static_cast<unsigned>((n_out + block_cols - 1) / block_cols),
                  static_cast<unsigned>(std::min(experts, pairs)));
  expert_rows_kernel<T, R><<<grid, kRowsThreads, 0, stream_for(out.device().index)>>>(
      ptr<T>(x), rows.defined() ? ptr<int32_t>(rows) : nullptr, x.dim(0), ptr<T>(w), ptr<int32_t>(offsets),
      static_cast<int>(experts), pairs, ptr<T>(out), static_cast<int>(n_out), chunks);
}

template <typename T>
void launch_tiles(const Tensor& x, const Tensor& rows, const Tensor& w, const Tensor& offsets, Tensor& out) {
  const int64_t pairs = out.dim(0), n_out = out.dim(1), experts = offsets.numel() - 1;
  const dim3 grid(static_cast<unsigned>(n_out / kTileN),
                  static_cast<unsigned>((pairs + kTileM - 1) / kTileM + experts));
  grouped_tile_kernel<T><<<grid, kTileThreads, 0, stream_for(out.device().index)>>>(
      ptr<T>(x), rows.defined() ? ptr<int32_t>(rows) : nullptr, x.dim(0), ptr<T>(w), ptr<int32_t>(offsets),
      static_cast<int>(experts), pairs, ptr<T>(out), static_cast<int>(n_out), static_cast<int>(w.dim(1)));
}

}  // namespace

void moe_route(const Tensor& logits, int top_k, bool norm_topk_prob, Tensor& experts, Tensor& weights) {
  const int64_t tokens = logits.dim(0);
  if (tokens == 0) return;
  const int num_experts = static_cast<int>(logits.dim(1));
  with_float_type(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    moe_route_kernel<T><<<static_cast<unsigned>(tokens), kRouteThreads, num_experts * sizeof(float),
                          stream_for(logits.device().index)>>>(ptr<T>(logits), num_experts, top_k, norm_topk_prob,
                                                               ptr<int32_t>(experts), ptr<T>(weights));
  });
  check_launch("moe_route_kernel", logits);
}

void moe_group(const Tensor& experts, int num_experts, Tensor& offsets, Tensor& rows, Tensor& index) {
  moe_group_kernel<<<1, kGroupThreads, 2 * num_experts * sizeof(int32_t), stream_for(experts.device().index)>>>(
      ptr<int32_t>(experts), experts.numel(), static_cast<int>(experts.dim(1)), num_experts, ptr<int32_t>(offsets),
      ptr<int32_t>(rows), ptr<int32_t>(index));
  check_launch("moe_group_kernel", experts);
}

bool grouped_linear_supports(const Tensor& x, const Tensor& w) {
  const int64_t elems = 16 / static_cast<int64_t>(dtype_size(w.dtype()));
  return w.dim(1) % elems == 0 && w.dim(1) / elems <= INT32_MAX && aligned16(x.raw()) && aligned16(w.raw());
}

bool grouped_linear_uses_tiles(const Tensor& x, const Tensor& w, int64_t pairs, int64_t num_experts) {
  return (x.dtype() == DType::kBF16 || x.dtype() == DType::kF16) && w.dim(1) % kTileK == 0 &&
         (w.dim(0) / num_experts) % kTileN == 0 && pairs >= kGroupedTileMinRows * num_experts &&
         w.dim(1) <= INT32_MAX && w.dim(0) / num_experts <= INT32_MAX;
}

void grouped_linear(const Tensor& x, const Tensor& rows, const Tensor& w, const Tensor& offsets, int64_t group_rows,
                    Tensor& out) {
  const int64_t pairs = out.dim(0), experts = offsets.numel() - 1;
  if (pairs == 0 || out.dim(1) == 0) return;
  const bool tiles = grouped_linear_uses_tiles(x, w, pairs, experts);
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      if (tiles) return launch_tiles<T>(x, rows, w, offsets, out);
    }
    launch_rows<T>(x, rows, w, offsets, group_rows, out);
  });
  check_launch(tiles ? "grouped_tile_kernel" : "expert_rows_kernel", out);
}

}  // namespace omni::tensor::cuda
