// Paged attention: the dispatcher that hands each sequence to the decode, prefill or general kernel
// (attention_kernels.h), and the general kernel, for every dtype and head size.
//
// General kernel:
// A block takes one work item (a sequence, a tile of up to kRowsPerBlock / heads-per-chunk of its
// query tokens, one KV split) for one kv head and a chunk of the query heads that share it (GQA:
// the K/V tile is loaded once into shared memory for all of them). Keys stream through shared
// memory kKeyTile at a time; each warp keeps the online-softmax state of its rows in registers,
// with lane j scoring key j of the tile. When the batch alone would not fill the GPU (decode of a
// few sequences), each sequence's keys are split into partitions processed by separate blocks
// (flash-decoding) and a second kernel merges the partial results.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "tensor/cuda/attention_kernels.h"
#include "tensor/cuda/common.cuh"
#include "tensor/cuda/kernels.h"

namespace omni::tensor::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kKeyTile = 32;
constexpr int kMaxHeadDim = 256;
constexpr int kDimsPerLane = kMaxHeadDim / 32;
// Key rows in shared memory are padded by 4 floats: lane j reads row j with 16-byte loads, and
// the pad puts the 8 lanes of each quarter-warp on distinct banks.
constexpr int kKeyPad = 4;

struct SeqInfo {
  int32_t query_start, query_len, context_len, table_offset, splits, partial_offset;
};
struct WorkItem {
  int32_t seq, first_token, split;
};

struct AttentionParams {
  const SeqInfo* seqs;
  const WorkItem* items;
  const int32_t* tables;
  const int32_t* row_seq;  // q row -> sequence, -1 for rows no sequence owns
  int heads, kv_heads, head_dim, block_size, group, heads_per_chunk, chunks, tokens_per_tile;
  int partition;  // keys per split
  float scale;
  int window;
  float* partial_out;  // [partial rows, heads, head_dim], normalised
  float* partial_ml;   // [partial rows, heads, 2]: running max, sum of exponentials
};

// Loads keys [tile, tile + kKeyTile) (zeros past key_end) of kv head `kvh` into shared memory as
// float32. With rows of whole 16-byte vectors every thread first issues all its vector loads, then
// converts: the loads are in flight together instead of one at a time.
template <typename T>
__device__ __forceinline__ void load_kv_tile(const T* k_cache, const T* v_cache, const AttentionParams& p,
                                             int table_offset, int kvh, int tile, int key_end, float* k_s, float* v_s) {
  const int hd = p.head_dim;
  const int64_t kv_row = static_cast<int64_t>(p.kv_heads) * hd;
  auto offset_of = [&](int pos) {
    const int64_t slot =
        static_cast<int64_t>(p.tables[table_offset + pos / p.block_size]) * p.block_size + pos % p.block_size;
    return slot * kv_row + static_cast<int64_t>(kvh) * hd;
  };
  constexpr int kVec = 16 / sizeof(T);
  if (hd % kVec == 0) {
    constexpr int kLoads = kKeyTile * kMaxHeadDim / kVec / (kWarps * 32);
    const int per_row = hd / kVec;
    uint4 kr[kLoads], vr[kLoads];
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int e = threadIdx.x + i * kWarps * 32;
      kr[i] = vr[i] = make_uint4(0, 0, 0, 0);
      if (e < kKeyTile * per_row && tile + e / per_row < key_end) {
        const int64_t at = offset_of(tile + e / per_row) + (e % per_row) * kVec;
        kr[i] = __ldg(reinterpret_cast<const uint4*>(k_cache + at));
        vr[i] = __ldg(reinterpret_cast<const uint4*>(v_cache + at));
      }
    }
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int e = threadIdx.x + i * kWarps * 32;
      if (e >= kKeyTile * per_row) break;
      const int j = e / per_row, d = (e % per_row) * kVec;
      T kt[kVec], vt[kVec];
      memcpy(kt, &kr[i], sizeof kt);
      memcpy(vt, &vr[i], sizeof vt);
#pragma unroll
      for (int u = 0; u < kVec; ++u) {
        k_s[j * (hd + kKeyPad) + d + u] = to_float(kt[u]);
        v_s[j * hd + d + u] = to_float(vt[u]);
      }
    }
    return;
  }
  for (int e = threadIdx.x; e < kKeyTile * hd; e += blockDim.x) {
    const int j = e / hd, d = e % hd;
    float kv = 0.0f, vv = 0.0f;
    if (tile + j < key_end) {
      const int64_t at = offset_of(tile + j) + d;
      kv = to_float(k_cache[at]);
      vv = to_float(v_cache[at]);
    }
    k_s[j * (hd + kKeyPad) + d] = kv;
    v_s[j * hd + d] = vv;
  }
}

// q . k over hd floats of shared memory; 16-byte reads when hd allows (the rows are 16-byte
// aligned then: every row offset is a multiple of 4 floats).
__device__ __forceinline__ float dot_row(const float* q, const float* k, int hd) {
  float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
  if (hd % 4 == 0) {
    const auto* q4 = reinterpret_cast<const float4*>(q);
    const auto* k4 = reinterpret_cast<const float4*>(k);
    for (int d = 0; d < hd / 4; ++d) {
      const float4 x = q4[d], y = k4[d];
      a0 = fmaf(x.x, y.x, a0);
      a1 = fmaf(x.y, y.y, a1);
      a2 = fmaf(x.z, y.z, a2);
      a3 = fmaf(x.w, y.w, a3);
    }
    return (a0 + a1) + (a2 + a3);
  }
  for (int d = 0; d < hd; ++d) a0 = fmaf(q[d], k[d], a0);
  return a0;
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    attention_kernel(const T* q, const T* k_cache, const T* v_cache, T* out, AttentionParams p) {
  extern __shared__ __align__(16) float smem[];
  const int hd = p.head_dim;
  float* q_s = smem;                             // [kRowsPerBlock][hd]
  float* k_s = q_s + kRowsPerBlock * hd;         // [kKeyTile][hd + kKeyPad]
  float* v_s = k_s + kKeyTile * (hd + kKeyPad);  // [kKeyTile][hd]

  const WorkItem item = p.items[blockIdx.x];
  const SeqInfo seq = p.seqs[item.seq];
  const int kvh = blockIdx.y / p.chunks;
  const int chunk = blockIdx.y % p.chunks;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tile_tokens = min(p.tokens_per_tile, seq.query_len - item.first_token);
  const int rows = tile_tokens * p.heads_per_chunk;

  // Row r of the tile is query token first_token + r / heads_per_chunk, head r % heads_per_chunk of the chunk.
  auto head_of = [&](int r) { return kvh * p.group + chunk * p.heads_per_chunk + r % p.heads_per_chunk; };
  auto row_valid = [&](int r) { return r < rows && chunk * p.heads_per_chunk + r % p.heads_per_chunk < p.group; };
  auto q_row_of = [&](int r) { return seq.query_start + item.first_token + r / p.heads_per_chunk; };

  for (int e = threadIdx.x; e < kRowsPerBlock * hd; e += blockDim.x) {
    const int r = e / hd, d = e % hd;
    q_s[e] = row_valid(r) ? to_float(q[(static_cast<int64_t>(q_row_of(r)) * p.heads + head_of(r)) * hd + d]) : 0.0f;
  }

  // Keys this block may need: its split, up to the last token's position, from the first token's window.
  const int first_pos = seq.context_len + item.first_token;
  const int last_pos = first_pos + tile_tokens - 1;
  int key_begin = item.split * p.partition;
  int key_end = min(key_begin + p.partition, last_pos + 1);
  if (p.window > 0) key_begin = max(key_begin, first_pos - p.window + 1);

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int j = 0; j < kDimsPerLane; ++j) acc[i][j] = 0.0f;
  }

  for (int tile = key_begin; tile < key_end; tile += kKeyTile) {
    __syncthreads();
    load_kv_tile(k_cache, v_cache, p, seq.table_offset, kvh, tile, key_end, k_s, v_s);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp + i * kWarps;
      if (!row_valid(r)) continue;
      const int pos = seq.context_len + item.first_token + r / p.heads_per_chunk;
      const int key = tile + lane;
      const bool visible = key < key_end && key <= pos && (p.window <= 0 || key > pos - p.window);
      float s = -INFINITY;
      if (visible) {
        s = dot_row(q_s + r * hd, k_s + lane * (hd + kKeyPad), hd) * p.scale;
      }
      const float tile_max = warp_max(s);
      if (tile_max == -INFINITY) continue;
      const float m_new = fmaxf(m[i], tile_max);
      const float correction = expf(m[i] - m_new);
      const float prob = visible ? expf(s - m_new) : 0.0f;
      l[i] = l[i] * correction + warp_sum(prob);
      m[i] = m_new;
#pragma unroll
      for (int j = 0; j < kDimsPerLane; ++j) acc[i][j] *= correction;
      for (int jj = 0; jj < kKeyTile; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, prob, jj);
        if (pj == 0.0f) continue;
#pragma unroll
        for (int j = 0; j < kDimsPerLane; ++j) {
          const int d = lane + 32 * j;
          if (d < hd) acc[i][j] = fmaf(pj, v_s[jj * hd + d], acc[i][j]);
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = warp + i * kWarps;
    if (!row_valid(r)) continue;
    const int h = head_of(r);
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    if (seq.splits == 1) {
      T* o = out + (static_cast<int64_t>(q_row_of(r)) * p.heads + h) * hd;
#pragma unroll
      for (int j = 0; j < kDimsPerLane; ++j) {
        const int d = lane + 32 * j;
        if (d < hd) o[d] = from_float<T>(acc[i][j] * inv);
      }
    } else {
      const int64_t prow =
          seq.partial_offset + static_cast<int64_t>(item.first_token + r / p.heads_per_chunk) * seq.splits + item.split;
      float* o = p.partial_out + (prow * p.heads + h) * hd;
#pragma unroll
      for (int j = 0; j < kDimsPerLane; ++j) {
        const int d = lane + 32 * j;
        if (d < hd) o[d] = acc[i][j] * inv;
      }
      if (lane == 0) {
        p.partial_ml[(prow * p.heads + h) * 2] = m[i];
        p.partial_ml[(prow * p.heads + h) * 2 + 1] = l[i];
      }
    }
  }
}

// One block per (q row, head): merges the splits of split sequences.
template <typename T>
__global__ void combine_kernel(T* out, AttentionParams p) {
  const int row = blockIdx.x, h = blockIdx.y, hd = p.head_dim;
  T* o = out + (static_cast<int64_t>(row) * p.heads + h) * hd;
  const int s = p.row_seq[row];
  if (s < 0) return;
  const SeqInfo seq = p.seqs[s];
  if (seq.splits == 1) return;
  const int64_t first = seq.partial_offset + static_cast<int64_t>(row - seq.query_start) * seq.splits;
  float mx = -INFINITY;
  for (int i = 0; i < seq.splits; ++i) {
    if (p.partial_ml[((first + i) * p.heads + h) * 2 + 1] > 0.0f)
      mx = fmaxf(mx, p.partial_ml[((first + i) * p.heads + h) * 2]);
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float num = 0.0f, den = 0.0f;
    for (int i = 0; i < seq.splits; ++i) {
      const float li = p.partial_ml[((first + i) * p.heads + h) * 2 + 1];
      if (li <= 0.0f) continue;
      const float w = li * expf(p.partial_ml[((first + i) * p.heads + h) * 2] - mx);
      num += w * p.partial_out[((first + i) * p.heads + h) * hd + d];
      den += w;
    }
    o[d] = from_float<T>(den > 0.0f ? num / den : 0.0f);
  }
}

size_t shared_bytes(int hd) {
  return sizeof(float) * (static_cast<size_t>(kRowsPerBlock) * hd + static_cast<size_t>(kKeyTile) * (hd + kKeyPad) +
                          static_cast<size_t>(kKeyTile) * hd);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

}  // namespace omni::tensor::cuda

namespace omni::tensor::cuda::attention {

void general(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, std::span<const ops::PagedSequence> seqs,
             const Geometry& g, Tensor& out) {
  const int device = q.device().index;
  const int total_rows = static_cast<int>(q.dim(0));
  if (total_rows == 0 || seqs.empty()) return;
  const float scale = g.scale;
  const int sliding_window = g.window;
  AttentionParams p{};
  p.heads = g.heads;
  p.head_dim = g.head_dim;
  p.block_size = g.block_size;
  p.kv_heads = g.kv_heads;
  p.group = p.heads / p.kv_heads;
  p.heads_per_chunk = std::min(p.group, kRowsPerBlock);
  p.chunks = static_cast<int>(ceil_div(p.group, p.heads_per_chunk));
  p.tokens_per_tile = kRowsPerBlock / p.heads_per_chunk;
  p.scale = scale;
  p.window = sliding_window;

  // Split the keys only when the unsplit grid would leave most multiprocessors idle.
  int64_t base_items = 0, longest = 1;
  for (const auto& s : seqs) {
    base_items += ceil_div(s.query_len, p.tokens_per_tile);
    longest = std::max<int64_t>(longest, s.context_len + s.query_len);
  }
  const int64_t base_blocks = std::max<int64_t>(1, base_items * p.kv_heads * p.chunks);
  const int64_t target_blocks = 4 * static_cast<int64_t>(multiprocessor_count(device));
  int64_t partition = longest;
  if (base_blocks < target_blocks) {
    const int64_t splits = std::min<int64_t>(64, ceil_div(target_blocks, base_blocks));
    partition = std::max<int64_t>(kKeyTile, ceil_div(ceil_div(longest, splits), kKeyTile) * kKeyTile);
  }
  p.partition = static_cast<int>(partition);

  // Metadata, packed into one upload: sequences, work items, block tables, row -> sequence.
  std::vector<SeqInfo> infos(seqs.size());
  std::vector<WorkItem> items;
  std::vector<int32_t> tables, row_seq(total_rows, -1);
  int64_t partial_rows = 0;
  bool needs_combine = false;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto& s = seqs[i];
    const int64_t len = s.context_len + s.query_len;
    const int splits = static_cast<int>(ceil_div(len, partition));
    infos[i] = {s.query_start, s.query_len,
                s.context_len, static_cast<int32_t>(tables.size()),
                splits,        static_cast<int32_t>(splits > 1 ? partial_rows : 0)};
    if (splits > 1) {
      partial_rows += static_cast<int64_t>(s.query_len) * splits;
      needs_combine = true;
    }
    tables.insert(tables.end(), s.block_table.begin(), s.block_table.begin() + ceil_div(len, p.block_size));
    for (int t = 0; t < s.query_len; t += p.tokens_per_tile)
      for (int split = 0; split < splits; ++split) items.push_back({static_cast<int32_t>(i), t, split});
    for (int t = 0; t < s.query_len; ++t) row_seq[s.query_start + t] = static_cast<int32_t>(i);
  }

  static_assert(sizeof(SeqInfo) % 4 == 0 && sizeof(WorkItem) % 4 == 0);
  std::vector<int32_t> packed;
  auto append = [&packed](const void* data, size_t bytes) {
    const auto* words = static_cast<const int32_t*>(data);
    packed.insert(packed.end(), words, words + bytes / 4);
  };
  append(infos.data(), infos.size() * sizeof(SeqInfo));
  const size_t items_at = packed.size();
  append(items.data(), items.size() * sizeof(WorkItem));
  const size_t tables_at = packed.size();
  append(tables.data(), tables.size() * 4);
  const size_t rows_at = packed.size();
  append(row_seq.data(), row_seq.size() * 4);
  Tensor meta = Tensor::empty({static_cast<int64_t>(packed.size())}, DType::kI32, q.device());
  cudaStream_t stream = stream_for(device);
  upload_async(meta.raw(), packed.data(), packed.size() * 4, device);
  const int32_t* base = static_cast<const int32_t*>(meta.raw());
  p.seqs = reinterpret_cast<const SeqInfo*>(base);
  p.items = reinterpret_cast<const WorkItem*>(base + items_at);
  p.tables = base + tables_at;
  p.row_seq = base + rows_at;

  Tensor partial_out, partial_ml;
  if (partial_rows > 0) {
    partial_out = Tensor::empty({partial_rows, p.heads, p.head_dim}, DType::kF32, q.device());
    partial_ml = Tensor::empty({partial_rows, p.heads, 2}, DType::kF32, q.device());
    p.partial_out = static_cast<float*>(partial_out.raw());
    p.partial_ml = static_cast<float*>(partial_ml.raw());
  }

  const size_t smem = shared_bytes(p.head_dim);
  with_float_type(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (!items.empty()) {
      check(cudaFuncSetAttribute(attention_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(smem)),
            "cudaFuncSetAttribute(attention_kernel)", device);
      const dim3 grid(static_cast<unsigned>(items.size()), static_cast<unsigned>(p.kv_heads * p.chunks));
      attention_kernel<T>
          <<<grid, kWarps * 32, smem, stream>>>(ptr<T>(q), ptr<T>(k_cache), ptr<T>(v_cache), ptr<T>(out), p);
      check_launch("attention_kernel", out);
    }
    if (needs_combine) {
      combine_kernel<T><<<dim3(total_rows, p.heads), 128, 0, stream>>>(ptr<T>(out), p);
      check_launch("combine_kernel", out);
    }
  });
}

}  // namespace omni::tensor::cuda::attention

namespace omni::tensor::cuda {

int max_attention_head_dim() { return kMaxHeadDim; }

bool paged_decode_attention_supports(DType dtype, int head_dim) {
  return attention::decode_fixed_supports(dtype, head_dim);
}

void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     std::span<const ops::PagedSequence> seqs, float scale, int sliding_window, Tensor& out) {
  if (q.dim(0) == 0) return;
  const attention::Geometry g{static_cast<int>(q.dim(1)),
                              static_cast<int>(k_cache.dim(2)),
                              static_cast<int>(q.dim(2)),
                              static_cast<int>(k_cache.dim(1)),
                              scale,
                              sliding_window};
  const bool decode_ok = attention::decode_supports(q.dtype(), g.head_dim);
  const bool prefill_ok = attention::prefill_supports(q.dtype(), g.head_dim);
  std::vector<ops::PagedSequence> decode, prefill, general;
  int64_t owned_rows = 0;
  for (const auto& s : seqs) {
    owned_rows += s.query_len;
    if (s.query_len == 0) continue;
    if (s.query_len == 1 && decode_ok) {
      decode.push_back(s);
    } else if (prefill_ok) {
      prefill.push_back(s);
    } else {
      general.push_back(s);
    }
  }
  // Rows no sequence owns are zero (ops.h); the kernels write only the rows of their sequences.
  if (owned_rows < q.dim(0)) zero_bytes(out.raw(), out.nbytes(), out.device().index);
  attention::decode(q, k_cache, v_cache, decode, g, out);
  attention::prefill(q, k_cache, v_cache, prefill, g, out);
  attention::general(q, k_cache, v_cache, general, g, out);
}

void paged_decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& context_lens,
                            const Tensor& block_tables, float scale, int sliding_window, Tensor& out) {
  const attention::Geometry g{static_cast<int>(q.dim(1)),
                              static_cast<int>(k_cache.dim(2)),
                              static_cast<int>(q.dim(2)),
                              static_cast<int>(k_cache.dim(1)),
                              scale,
                              sliding_window};
  attention::decode_fixed(q, k_cache, v_cache, context_lens, block_tables, g, out);
}

}  // namespace omni::tensor::cuda
