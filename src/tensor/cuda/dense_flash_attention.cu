// Bidirectional attention of one sequence as one fused kernel (image_kernels.h, flash_attention):
// the scores never leave the SM.
//
// A block of 4 warps takes 128 query rows of one head; each warp owns 32 of them as two m16 tiles.
// Keys and values go through shared memory 64 at a time (cp.async, 16 bytes per copy, rows padded
// by 16 bytes so that ldmatrix hits distinct banks). Per tile of keys a warp computes S = Q K^T
// with mma.sync m16n8k16 (float32 accumulation), Q's fragments read from shared memory with
// ldmatrix for each 16 columns (holding them in registers for both m16 tiles would cost 64 more
// registers than the 255 a thread has beside O and S), the K fragment of each 16 keys reused by
// both m16 tiles. The online softmax runs on the S fragments in registers in the exp2 domain, the
// row maxima kept in scaled units so that each probability is one fma and one exp2; P is rounded to
// the dtype and handed to O += P V as A fragments (the C layout of two n8 tiles is the A layout of
// one k16 step), so it never goes through shared memory either. The row sums are of the unrounded
// probabilities.
//
// Loads overlap arithmetic as in prefill_attention.cu: the next tile's K is requested once every
// warp has its scores, its V once every warp has used this V. Query rows past the sequence are
// zeros and never stored; keys past it are zeros whose scores are masked, only in the last tile.
#include <cstdint>

#include "tensor/cuda/common.cuh"
#include "tensor/cuda/image_kernels.h"
#include "tensor/cuda/tensor_core.cuh"

namespace omni::tensor::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTilesPerWarp = 2;                    // m16 tiles of queries per warp
constexpr int kRows = 16 * kTilesPerWarp * kWarps;  // query rows per block
constexpr int kKeys = 64;                           // keys per tile
constexpr float kLog2e = 1.4426950408889634f;

struct FlashParams {
  int s, skv, heads;
  float scale_log2;  // scale * log2(e), > 0
};

// 2^x on the special-function unit, results below float32's normal range flushed to zero (a
// probability under 1e-38 of the row's largest adds nothing to a float32 sum).
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 2)
    flash_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out,
                 FlashParams p) {
  constexpr int kStride = D + 8;  // shared row, in elements
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
  constexpr int kMt = kTilesPerWarp;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);  // [kRows][kStride]
  T* k_s = q_s + kRows * kStride;           // [kKeys][kStride]
  T* v_s = k_s + kKeys * kStride;           // [kKeys][kStride]

  const int head = blockIdx.y;
  const int first_row = blockIdx.x * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row_stride = static_cast<int64_t>(p.heads) * D;
  const T* q_head = q + head * D;
  const T* k_head = k + head * D;
  const T* v_head = v + head * D;

  for (int c = threadIdx.x; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = first_row + r < p.s;
    cp_async16(q_s + r * kStride + col, valid ? q_head + (first_row + r) * row_stride + col : q, valid);
  }
  cp_async_commit();

  auto load_tile = [&](T* dst, const T* src_head, int tile) {
    for (int c = threadIdx.x; c < kKeys * kChunks; c += kThreads) {
      const int j = c / kChunks, col = (c % kChunks) * 8;
      const bool valid = tile + j < p.skv;
      cp_async16(dst + j * kStride + col, valid ? src_head + (tile + j) * row_stride + col : src_head, valid);
    }
  };

  float o[kMt][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
  }
  // Per thread: rows lane / 4 and lane / 4 + 8 of each m16 tile; m in scaled (log2) units.
  float m[kMt][2], l[kMt][2];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
  const T* q_warp = q_s + warp * 16 * kMt * kStride;

  // Copies in flight at the top of each iteration: K and V of this tile (and Q on the first). A
  // commit with nothing to copy past the last tile keeps the group count the waits rely on.
  load_tile(k_s, k_head, 0);
  cp_async_commit();
  load_tile(v_s, v_head, 0);
  cp_async_commit();
  for (int tile = 0; tile < p.skv; tile += kKeys) {
    const bool more = tile + kKeys < p.skv;
    cp_async_wait<1>();  // Q and this K have landed; this V may still be in flight
    __syncthreads();

    float s[kMt][kKeys / 8][4];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
      for (int i = 0; i < kKeys / 8; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[kMt][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        ldmatrix_x4(qa[mt], q_warp + (mt * 16 + lane % 16) * kStride + kk * 16 + (lane / 16) * 8);
      }
#pragma unroll
      for (int np = 0; np < kKeys / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, k_s + (np * 16 + lane % 8 + (lane / 16) * 8) * kStride + kk * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          mma(s[mt][2 * np], qa[mt], b[0], b[1], T{});
          mma(s[mt][2 * np + 1], qa[mt], b[2], b[3], T{});
        }
      }
    }

    if (tile + kKeys > p.skv) {  // the last, partial tile: keys past the sequence see nothing
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (tile + nt * 8 + 2 * (lane % 4) + e % 2 >= p.skv) {
#pragma unroll
            for (int mt = 0; mt < kMt; ++mt) s[mt][nt][e] = -INFINITY;
          }
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[mt][h], mx * p.scale_log2);
        // Every tile holds at least one key, so m_new is finite from the first tile on.
        const float correction = exp2_ftz(m[mt][h] - m_new);
        m[mt][h] = m_new;
        l[mt][h] *= correction;
#pragma unroll
        for (int dn = 0; dn < D / 8; ++dn) {
          o[mt][dn][2 * h] *= correction;
          o[mt][dn][2 * h + 1] *= correction;
        }
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt) {
          s[mt][nt][2 * h] = exp2_ftz(fmaf(s[mt][nt][2 * h], p.scale_log2, -m_new));
          s[mt][nt][2 * h + 1] = exp2_ftz(fmaf(s[mt][nt][2 * h + 1], p.scale_log2, -m_new));
          l[mt][h] += s[mt][nt][2 * h] + s[mt][nt][2 * h + 1];
        }
      }
    }

    __syncthreads();  // every warp has read K
    if (more) load_tile(k_s, k_head, tile + kKeys);
    cp_async_commit();
    cp_async_wait<1>();  // this V has landed; the next K may still be in flight
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      uint32_t a[kMt][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        a[mt][0] = pack2(s[mt][2 * kk][0], s[mt][2 * kk][1], T{});
        a[mt][1] = pack2(s[mt][2 * kk][2], s[mt][2 * kk][3], T{});
        a[mt][2] = pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1], T{});
        a[mt][3] = pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3], T{});
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_s + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kStride + dp * 16 + (lane / 16) * 8);
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          mma(o[mt][2 * dp], a[mt], b[0], b[1], T{});
          mma(o[mt][2 * dp + 1], a[mt], b[2], b[3], T{});
        }
      }
    }
    __syncthreads();  // every warp has read V
    if (more) load_tile(v_s, v_head, tile + kKeys);
    cp_async_commit();
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = l[mt][h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int r = first_row + warp * 16 * kMt + mt * 16 + lane / 4 + 8 * h;
      if (r >= p.s) continue;
      const float inv = 1.0f / sum;  // sum >= 1: the row's largest probability is exp2(0)
      T* row = out + r * row_stride + head * D;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        *reinterpret_cast<uint32_t*>(row + dn * 8 + 2 * (lane % 4)) =
            pack2(o[mt][dn][2 * h] * inv, o[mt][dn][2 * h + 1] * inv, T{});
      }
    }
  }
}

template <typename T, int D>
void launch(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, const FlashParams& p) {
  const int device = out.device().index;
  constexpr int smem = static_cast<int>(sizeof(T)) * (kRows + 2 * kKeys) * (D + 8);
  check(cudaFuncSetAttribute(flash_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
        "cudaFuncSetAttribute(flash_kernel)", device);
  const dim3 grid(static_cast<unsigned>((p.s + kRows - 1) / kRows), static_cast<unsigned>(p.heads));
  flash_kernel<T, D><<<grid, kThreads, smem, stream_for(device)>>>(ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<T>(out), p);
  check_launch("flash_kernel", out);
}

}  // namespace

void launch_flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out) {
  FlashParams p{};
  p.s = static_cast<int>(q.dim(0));
  p.skv = static_cast<int>(k.dim(0));
  p.heads = static_cast<int>(q.dim(1));
  p.scale_log2 = scale * kLog2e;
  if (p.s == 0 || p.heads == 0) return;
  if (p.skv == 0) {
    zero_bytes(out.raw(), out.nbytes(), out.device().index);
    return;
  }
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if (q.dim(2) == 64) {
      launch<T, 64>(q, k, v, out, p);
    } else {
      launch<T, 128>(q, k, v, out, p);
    }
  };
  if (q.dtype() == DType::kBF16) {
    run(__nv_bfloat16{});
  } else {
    run(__half{});
  }
}

}  // namespace omni::tensor::cuda
