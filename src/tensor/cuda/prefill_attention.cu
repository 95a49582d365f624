// Tiled flash attention over paged KV caches on the tensor cores (attention_kernels.h).
//
// A block of 4 warps takes 64 query rows: consecutive tokens of one sequence times the query heads
// of one kv head (row r is token r / heads_per_chunk, head r % heads_per_chunk), so each K/V tile
// is loaded once for the whole GQA group. Keys go through shared memory 64 at a time (cp.async,
// 16 bytes per copy, rows padded by 16 bytes so that ldmatrix hits distinct banks); each warp owns
// 16 rows: S = Q K^T and O += P V with mma.sync m16n8k16 (float32 accumulation), the online
// softmax (exp2 domain) on the S fragments in registers, P handed to the second product as A
// fragments without going through shared memory (the C layout of two n8 tiles is the A layout).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "tensor/cuda/attention_kernels.h"
#include "tensor/cuda/common.cuh"
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/tensor_core.cuh"

namespace omni::tensor::cuda::attention {
namespace {

constexpr int kRows = 64;  // query rows per block, 16 per warp
constexpr int kKeys = 64;  // keys per tile
constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

struct PrefillSeq {
  int32_t query_start, query_len, context_len, table_offset;
};
struct PrefillItem {
  int32_t seq, first_token;
};

struct PrefillParams {
  const PrefillSeq* seqs;
  const PrefillItem* items;
  const int32_t* tables;
  int heads, kv_heads, group, heads_per_chunk, chunks, tokens_per_tile, block_size, window;
  float scale_log2;
};

template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    prefill_kernel(const T* q, const T* k_cache, const T* v_cache, T* out, PrefillParams p) {
  constexpr int kStride = D + 8;  // shared row, in elements
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);  // [kRows][kStride]
  T* k_s = q_s + kRows * kStride;           // [kKeys][kStride]
  T* v_s = k_s + kKeys * kStride;           // [kKeys][kStride]

  const PrefillItem item = p.items[blockIdx.x];
  const PrefillSeq seq = p.seqs[item.seq];
  const int kvh = blockIdx.y / p.chunks, chunk = blockIdx.y % p.chunks;
  const int hpc = p.heads_per_chunk;
  const int tile_tokens = min(p.tokens_per_tile, seq.query_len - item.first_token);
  const int rows = tile_tokens * hpc;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int32_t* table = p.tables + seq.table_offset;
  const int64_t token_stride = static_cast<int64_t>(p.kv_heads) * D;

  for (int c = threadIdx.x; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const int gh = chunk * hpc + r % hpc;
    const bool valid = r < rows && gh < p.group;
    const T* src =
        valid
            ? q +
                  (static_cast<int64_t>(seq.query_start + item.first_token + r / hpc) * p.heads + kvh * p.group + gh) *
                      D +
                  col
            : q;
    cp_async16(q_s + r * kStride + col, src, valid);
  }
  cp_async_commit();

  const int first_pos = seq.context_len + item.first_token;
  const int key_end = first_pos + tile_tokens;
  const int key_begin = p.window > 0 ? max(0, first_pos - p.window + 1) : 0;

  // This thread's two rows of the warp's 16; -1 masks every key of a row no query owns.
  const int r0 = warp * 16 + lane / 4;
  const int pos[2] = {r0 < rows ? first_pos + r0 / hpc : -1, r0 + 8 < rows ? first_pos + (r0 + 8) / hpc : -1};

  auto load_tile = [&](T* dst, const T* cache, int tile) {
    for (int c = threadIdx.x; c < kKeys * kChunks; c += kThreads) {
      const int j = c / kChunks, col = (c % kChunks) * 8;
      const int key = tile + j;
      const bool valid = key < key_end;
      const T* src = cache;
      if (valid) {
        src = cache +
              (static_cast<int64_t>(table[key / p.block_size]) * p.block_size + key % p.block_size) * token_stride +
              kvh * D + col;
      }
      cp_async16(dst + j * kStride + col, src, valid);
    }
  };

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  uint32_t qa[D / 16][4];

  // Copies in flight at the top of each iteration: K and V of this tile (and Q on the first). The
  // next tile's K is requested as soon as every warp has its scores, its V once every warp has
  // used this V, so each load overlaps the other half of the arithmetic. A commit with nothing to
  // copy past the last tile keeps the group count the waits rely on.
  load_tile(k_s, k_cache, key_begin);
  cp_async_commit();
  load_tile(v_s, v_cache, key_begin);
  cp_async_commit();
  for (int tile = key_begin; tile < key_end; tile += kKeys) {
    const bool more = tile + kKeys < key_end;
    cp_async_wait<1>();  // Q and this K have landed; this V may still be in flight
    __syncthreads();
    if (tile == key_begin) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        ldmatrix_x4(qa[kk], q_s + (warp * 16 + lane % 16) * kStride + kk * 16 + (lane / 16) * 8);
      }
    }

    float s[kKeys / 8][4];
#pragma unroll
    for (int i = 0; i < kKeys / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < kKeys / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, k_s + (np * 16 + lane % 8 + (lane / 16) * 8) * kStride + kk * 16 + ((lane / 8) % 2) * 8);
        mma(s[2 * np], qa[kk], b[0], b[1], T{});
        mma(s[2 * np + 1], qa[kk], b[2], b[3], T{});
      }
    }

#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row_pos = pos[e / 2];
        const int key = tile + nt * 8 + 2 * (lane % 4) + e % 2;
        const bool visible = key < key_end && key <= row_pos && (p.window <= 0 || key > row_pos - p.window);
        s[nt][e] = visible ? s[nt][e] * p.scale_log2 : -INFINITY;
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[h], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float correction = exp2f(m[h] - m_use);
      m[h] = m_new;
      l[h] *= correction;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        o[dn][2 * h] *= correction;
        o[dn][2 * h + 1] *= correction;
      }
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt) {
        s[nt][2 * h] = exp2f(s[nt][2 * h] - m_use);
        s[nt][2 * h + 1] = exp2f(s[nt][2 * h + 1] - m_use);
        l[h] += s[nt][2 * h] + s[nt][2 * h + 1];
      }
    }

    __syncthreads();  // every warp has read K
    if (more) load_tile(k_s, k_cache, tile + kKeys);
    cp_async_commit();
    cp_async_wait<1>();  // this V has landed; the next K may still be in flight
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const uint32_t a[4] = {pack2(s[2 * kk][0], s[2 * kk][1], T{}), pack2(s[2 * kk][2], s[2 * kk][3], T{}),
                             pack2(s[2 * kk + 1][0], s[2 * kk + 1][1], T{}),
                             pack2(s[2 * kk + 1][2], s[2 * kk + 1][3], T{})};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_s + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kStride + dp * 16 + (lane / 16) * 8);
        mma(o[2 * dp], a, b[0], b[1], T{});
        mma(o[2 * dp + 1], a, b[2], b[3], T{});
      }
    }
    __syncthreads();  // every warp has read V
    if (more) load_tile(v_s, v_cache, tile + kKeys);
    cp_async_commit();
  }
  cp_async_wait<0>();

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = l[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int r = r0 + 8 * h;
    const int gh = chunk * hpc + r % hpc;
    if (r >= rows || gh >= p.group) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    T* row =
        out + (static_cast<int64_t>(seq.query_start + item.first_token + r / hpc) * p.heads + kvh * p.group + gh) * D;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      *reinterpret_cast<uint32_t*>(row + dn * 8 + 2 * (lane % 4)) =
          pack2(o[dn][2 * h] * inv, o[dn][2 * h + 1] * inv, T{});
    }
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <typename T, int D>
void launch(dim3 grid, cudaStream_t stream, int device, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
            Tensor& out, const PrefillParams& p) {
  const int smem = static_cast<int>(sizeof(T)) * (kRows + 2 * kKeys) * (D + 8);
  check(cudaFuncSetAttribute(prefill_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
        "cudaFuncSetAttribute(prefill_kernel)", device);
  prefill_kernel<T, D><<<grid, kThreads, smem, stream>>>(ptr<T>(q), ptr<T>(k_cache), ptr<T>(v_cache), ptr<T>(out), p);
}

}  // namespace

bool prefill_supports(DType dtype, int head_dim) {
  return (dtype == DType::kBF16 || dtype == DType::kF16) && (head_dim == 64 || head_dim == 128);
}

void prefill(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, std::span<const ops::PagedSequence> seqs,
             const Geometry& g, Tensor& out) {
  if (seqs.empty()) return;
  const int device = q.device().index;
  PrefillParams p{};
  p.heads = g.heads;
  p.kv_heads = g.kv_heads;
  p.group = g.heads / g.kv_heads;
  p.heads_per_chunk = std::min(p.group, kRows);
  p.chunks = static_cast<int>(ceil_div(p.group, p.heads_per_chunk));
  p.tokens_per_tile = kRows / p.heads_per_chunk;
  p.block_size = g.block_size;
  p.window = g.window;
  p.scale_log2 = g.scale * kLog2e;

  std::vector<PrefillSeq> infos(seqs.size());
  std::vector<PrefillItem> items;
  std::vector<int32_t> tables;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto& s = seqs[i];
    infos[i] = {s.query_start, s.query_len, s.context_len, static_cast<int32_t>(tables.size())};
    tables.insert(tables.end(), s.block_table.begin(),
                  s.block_table.begin() + ceil_div(s.context_len + s.query_len, g.block_size));
    for (int t = 0; t < s.query_len; t += p.tokens_per_tile) items.push_back({static_cast<int32_t>(i), t});
  }
  // Tiles with the most keys first, so that the short ones fill the tail of the grid.
  std::stable_sort(items.begin(), items.end(), [&](const PrefillItem& a, const PrefillItem& b) {
    return infos[a.seq].context_len + a.first_token > infos[b.seq].context_len + b.first_token;
  });

  static_assert(sizeof(PrefillSeq) % 4 == 0 && sizeof(PrefillItem) % 4 == 0);
  std::vector<int32_t> packed;
  auto append = [&packed](const void* data, size_t bytes) {
    const auto* words = static_cast<const int32_t*>(data);
    packed.insert(packed.end(), words, words + bytes / 4);
  };
  append(infos.data(), infos.size() * sizeof(PrefillSeq));
  const size_t items_at = packed.size();
  append(items.data(), items.size() * sizeof(PrefillItem));
  const size_t tables_at = packed.size();
  append(tables.data(), tables.size() * 4);
  Tensor meta = Tensor::empty({static_cast<int64_t>(packed.size())}, DType::kI32, q.device());
  upload_async(meta.raw(), packed.data(), packed.size() * 4, device);
  const auto* words = static_cast<const int32_t*>(meta.raw());
  p.seqs = reinterpret_cast<const PrefillSeq*>(words);
  p.items = reinterpret_cast<const PrefillItem*>(words + items_at);
  p.tables = words + tables_at;

  cudaStream_t stream = stream_for(device);
  const dim3 grid(static_cast<unsigned>(items.size()), static_cast<unsigned>(g.kv_heads * p.chunks));
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if (g.head_dim == 64) {
      launch<T, 64>(grid, stream, device, q, k_cache, v_cache, out, p);
    } else {
      launch<T, 128>(grid, stream, device, q, k_cache, v_cache, out, p);
    }
    check_launch("prefill_kernel", out);
  };
  if (q.dtype() == DType::kBF16) {
    run(__nv_bfloat16{});
  } else {
    run(__half{});
  }
}

}  // namespace omni::tensor::cuda::attention
