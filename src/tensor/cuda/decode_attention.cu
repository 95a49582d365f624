// Flash-decoding over paged KV caches (attention_kernels.h).
//
// A block takes one (sequence, key partition) for one kv head and up to G of the query heads that
// share it. Its warps are cut into slots of D / 8 lanes; a slot takes one key at a time, each lane
// holding 8 consecutive dims of it (one 16-byte load of K and one of V), so every K and V row is
// read once, whole and coalesced, for all the block's query heads. A slot issues the loads of its
// next U keys before using any of them, keeps an online-softmax state per head in registers
// (scores in the exp2 domain: the query is pre-scaled by scale * log2(e)), and the slots merge
// through shared memory at the end. Partitions of one sequence are merged by a second kernel.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "tensor/cuda/attention_kernels.h"
#include "tensor/cuda/common.cuh"
#include "tensor/cuda/kernels.h"

namespace omni::tensor::cuda::attention {
namespace {

constexpr int kWarps = 4;
constexpr float kLog2e = 1.4426950408889634f;
// Fewest keys a partition holds: below this the merge costs more than the parallelism gains.
constexpr int kMinPartition = 128;

struct DecodeSeq {
  int32_t q_row, first_key, length, table_offset, splits, partial_offset;
};
struct DecodeItem {
  int32_t seq, split;
};

struct DecodeParams {
  const DecodeSeq* seqs;
  const DecodeItem* items;
  const int32_t* tables;
  int heads, kv_heads, group, chunks, block_size;
  // Keys per split; with fixed work, the fewest keys a split takes (a multiple of the key step).
  int partition;
  float scale_log2;
  float* partial_out;  // [partials, heads, D], normalised
  float* partial_ml;   // [partials, heads, 2]: max (exp2 domain), sum of exponentials
  // Fixed work (paged_decode_attention): row b is sequence b, split into `splits` partitions whose
  // partial results sit at b * splits; tables are [rows, table_width]; lengths come from context_lens.
  const int32_t* context_lens;
  int splits, table_width, window, num_blocks;
  DeviceErrorRecord* errors;
};

// Sequence `b` of a fixed-work launch: its keys, table and partial results. A padding row (negative
// context length) has no keys; a context the table cannot hold is recorded and cut to the table.
__device__ __forceinline__ DecodeSeq fixed_seq(const DecodeParams& p, int b, bool report) {
  const int context = p.context_lens[b];
  const int capacity = p.table_width * p.block_size;
  int length = context < 0 ? 0 : context + 1;
  if (length > capacity) {
    if (report) record_error(p.errors, DeviceErrorKind::kDecodeContext, b, context, capacity);
    length = capacity;
  }
  const int first = p.window > 0 ? max(0, length - p.window) : 0;
  return {b, first, length, b * p.table_width, p.splits, b * p.splits};
}

// Keys per split of a fixed-work sequence: enough for `splits` partitions to cover it, at least
// p.partition, a multiple of `step`.
__device__ __forceinline__ int fixed_partition(const DecodeParams& p, const DecodeSeq& seq, int step) {
  const int keys = seq.length - seq.first_key;
  const int per_split = (keys + p.splits - 1) / p.splits;
  return max(p.partition, (per_split + step - 1) / step * step);
}

__device__ __forceinline__ void unpack8(const uint4& raw, float (&f)[8], __nv_bfloat16) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

__device__ __forceinline__ void unpack8(const uint4& raw, float (&f)[8], __half) {
  const auto* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __half22float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

template <typename T, int D, int G, int U, bool kFixed>
__global__ void __launch_bounds__(kWarps * 32)
    decode_kernel(const T* q, const T* k_cache, const T* v_cache, T* out, DecodeParams p) {
  constexpr int kLanes = D / 8;  // lanes per key
  constexpr int kSlots = kWarps * 32 / kLanes;
  __shared__ float s_ml[kSlots][G][2];
  __shared__ float s_acc[kSlots][G][D];

  DecodeItem item;
  DecodeSeq seq;
  int partition = p.partition;
  if constexpr (kFixed) {
    item = {static_cast<int32_t>(blockIdx.x / p.splits), static_cast<int32_t>(blockIdx.x % p.splits)};
    seq = fixed_seq(p, item.seq, item.split == 0 && blockIdx.y == 0 && threadIdx.x == 0);
    partition = fixed_partition(p, seq, kSlots * U);
  } else {
    item = p.items[blockIdx.x];
    seq = p.seqs[item.seq];
  }
  const int kvh = blockIdx.y / p.chunks, chunk = blockIdx.y % p.chunks;
  const int head0 = kvh * p.group + chunk * G;
  const int heads_here = min(G, p.group - chunk * G);
  const int slot = threadIdx.x / kLanes;
  const int sub = threadIdx.x % kLanes;

  float qf[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (g < heads_here) {
      raw = *reinterpret_cast<const uint4*>(q + (static_cast<int64_t>(seq.q_row) * p.heads + head0 + g) * D + sub * 8);
    }
    unpack8(raw, qf[g], T{});
#pragma unroll
    for (int e = 0; e < 8; ++e) qf[g][e] *= p.scale_log2;
  }

  const int begin = seq.first_key + item.split * partition;
  const int end = min(begin + partition, seq.length);
  const int64_t token_stride = static_cast<int64_t>(p.kv_heads) * D;
  const int32_t* table = p.tables + seq.table_offset;
  const T* k_base = k_cache + static_cast<int64_t>(kvh) * D + sub * 8;
  const T* v_base = v_cache + static_cast<int64_t>(kvh) * D + sub * 8;

  float m[G], l[G], acc[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] = 0.0f;
  }

  for (int base = begin; base < end; base += kSlots * U) {
    uint4 kr[U], vr[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int key = base + u * kSlots + slot;
      kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      if (key < end) {
        const int32_t block = table[key / p.block_size];
        // Device-resident tables are checked here: a block outside the cache is masked and recorded.
        if (kFixed && (block < 0 || block >= p.num_blocks)) {
          if (sub == 0) record_error(p.errors, DeviceErrorKind::kKvBlock, seq.q_row, block, p.num_blocks);
          continue;
        }
        const int64_t at = (static_cast<int64_t>(block) * p.block_size + key % p.block_size) * token_stride;
        kr[u] = __ldg(reinterpret_cast<const uint4*>(k_base + at));
        vr[u] = __ldg(reinterpret_cast<const uint4*>(v_base + at));
      }
    }
    float s[G][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[8];
      unpack8(kr[u], kf, T{});
      const int key = base + u * kSlots + slot;
      bool valid = key < end;
      if constexpr (kFixed) {
        if (valid) {
          const int32_t block = table[key / p.block_size];
          valid = block >= 0 && block < p.num_blocks;
        }
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) dot = fmaf(qf[g][e], kf[e], dot);
#pragma unroll
        for (int o = kLanes / 2; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        s[g][u] = valid ? dot : -INFINITY;
      }
    }
    float vf[U][8];
#pragma unroll
    for (int u = 0; u < U; ++u) unpack8(vr[u], vf[u], T{});
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float mx = m[g];
#pragma unroll
      for (int u = 0; u < U; ++u) mx = fmaxf(mx, s[g][u]);
      if (mx == -INFINITY) continue;
      const float correction = exp2f(m[g] - mx);
      l[g] *= correction;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[g][e] *= correction;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float prob = exp2f(s[g][u] - mx);
        l[g] += prob;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[g][e] = fmaf(prob, vf[u][e], acc[g][e]);
      }
      m[g] = mx;
    }
  }

#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (sub == 0) {
      s_ml[slot][g][0] = m[g];
      s_ml[slot][g][1] = l[g];
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) s_acc[slot][g][sub * 8 + e] = acc[g][e];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < heads_here * D; idx += blockDim.x) {
    const int g = idx / D, d = idx % D;
    float mx = -INFINITY;
    for (int s = 0; s < kSlots; ++s) mx = fmaxf(mx, s_ml[s][g][0]);
    float sum = 0.0f, o = 0.0f;
    if (mx != -INFINITY) {
      for (int s = 0; s < kSlots; ++s) {
        const float w = exp2f(s_ml[s][g][0] - mx);
        sum += s_ml[s][g][1] * w;
        o += s_acc[s][g][d] * w;
      }
    }
    const float value = sum > 0.0f ? o / sum : 0.0f;
    const int h = head0 + g;
    if (seq.splits == 1) {
      out[(static_cast<int64_t>(seq.q_row) * p.heads + h) * D + d] = from_float<T>(value);
    } else {
      const int64_t partial = seq.partial_offset + item.split;
      p.partial_out[(partial * p.heads + h) * D + d] = value;
      if (d == 0) {
        p.partial_ml[(partial * p.heads + h) * 2] = mx;
        p.partial_ml[(partial * p.heads + h) * 2 + 1] = sum;
      }
    }
  }
}

// One block per (sequence, head): merges the partitions of sequences that were split.
template <typename T, bool kFixed>
__global__ void decode_combine_kernel(T* out, DecodeParams p, int head_dim) {
  const DecodeSeq seq = kFixed ? fixed_seq(p, blockIdx.x, false) : p.seqs[blockIdx.x];
  if (seq.splits == 1) return;
  const int h = blockIdx.y;
  const float* ml = p.partial_ml + (static_cast<int64_t>(seq.partial_offset) * p.heads + h) * 2;
  float mx = -INFINITY;
  for (int i = 0; i < seq.splits; ++i) {
    if (ml[static_cast<int64_t>(i) * p.heads * 2 + 1] > 0.0f) mx = fmaxf(mx, ml[static_cast<int64_t>(i) * p.heads * 2]);
  }
  T* o = out + (static_cast<int64_t>(seq.q_row) * p.heads + h) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float num = 0.0f, den = 0.0f;
    for (int i = 0; i < seq.splits; ++i) {
      const float li = ml[static_cast<int64_t>(i) * p.heads * 2 + 1];
      if (li <= 0.0f) continue;
      const float w = li * exp2f(ml[static_cast<int64_t>(i) * p.heads * 2] - mx);
      num += w * p.partial_out[((static_cast<int64_t>(seq.partial_offset) + i) * p.heads + h) * head_dim + d];
      den += w;
    }
    o[d] = from_float<T>(den > 0.0f ? num / den : 0.0f);
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Heads per block: the smallest of 1, 2, 4, 8 that holds the group (larger groups take chunks of 8).
int heads_per_block(int group) { return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8; }

// What decode and decode_fixed share: the head grouping of `g` into blocks and the keys a block
// takes per step of its loop (slots of D / 8 lanes, each loading U keys ahead).
struct DecodeLayout {
  DecodeParams params;  // heads, kv_heads, group, chunks, block_size, scale_log2 set
  int per_block;        // query heads per block
  int key_step;         // keys per block per loop step
};
DecodeLayout decode_layout(const Geometry& g) {
  DecodeLayout layout{};
  DecodeParams& p = layout.params;
  p.heads = g.heads;
  p.kv_heads = g.kv_heads;
  p.group = g.heads / g.kv_heads;
  layout.per_block = heads_per_block(p.group);
  p.chunks = static_cast<int>(ceil_div(p.group, layout.per_block));
  p.block_size = g.block_size;
  p.scale_log2 = g.scale * kLog2e;
  const int slots = kWarps * 32 / (g.head_dim / 8);
  layout.key_step = slots * (layout.per_block >= 8 ? 2 : 4);
  return layout;
}

template <typename T, int D, int G, bool kFixed>
void launch(dim3 grid, cudaStream_t stream, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, Tensor& out,
            const DecodeParams& p) {
  constexpr int kUnroll = G >= 8 ? 2 : 4;
  decode_kernel<T, D, G, kUnroll, kFixed>
      <<<grid, kWarps * 32, 0, stream>>>(ptr<T>(q), ptr<T>(k_cache), ptr<T>(v_cache), ptr<T>(out), p);
}

template <typename T, int D, bool kFixed>
void launch_for_group(int g, dim3 grid, cudaStream_t stream, const Tensor& q, const Tensor& k_cache,
                      const Tensor& v_cache, Tensor& out, const DecodeParams& p) {
  switch (g) {
    case 1:
      return launch<T, D, 1, kFixed>(grid, stream, q, k_cache, v_cache, out, p);
    case 2:
      return launch<T, D, 2, kFixed>(grid, stream, q, k_cache, v_cache, out, p);
    case 4:
      return launch<T, D, 4, kFixed>(grid, stream, q, k_cache, v_cache, out, p);
    default:
      return launch<T, D, 8, kFixed>(grid, stream, q, k_cache, v_cache, out, p);
  }
}

// Queues the decode kernel (and the merge when sequences are split) over `items` grid rows for
// `rows` sequences.
template <bool kFixed>
void launch_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, Tensor& out, const DecodeParams& p,
                   int per_block, unsigned items, unsigned rows, bool split, int head_dim) {
  cudaStream_t stream = stream_for(q.device().index);
  const dim3 grid(items, static_cast<unsigned>(p.kv_heads * p.chunks));
  auto run = [&](auto tag) {
    using T = decltype(tag);
    // Head sizes 16 and 32 only come with fixed work (decode_fixed_supports).
    switch (head_dim) {
      case 16:
        if constexpr (kFixed) launch_for_group<T, 16, kFixed>(per_block, grid, stream, q, k_cache, v_cache, out, p);
        break;
      case 32:
        if constexpr (kFixed) launch_for_group<T, 32, kFixed>(per_block, grid, stream, q, k_cache, v_cache, out, p);
        break;
      case 64:
        launch_for_group<T, 64, kFixed>(per_block, grid, stream, q, k_cache, v_cache, out, p);
        break;
      case 128:
        launch_for_group<T, 128, kFixed>(per_block, grid, stream, q, k_cache, v_cache, out, p);
        break;
      default:
        launch_for_group<T, 256, kFixed>(per_block, grid, stream, q, k_cache, v_cache, out, p);
    }
    check_launch("decode_kernel", out);
    if (split) {
      decode_combine_kernel<T, kFixed><<<dim3(rows, p.heads), 128, 0, stream>>>(ptr<T>(out), p, head_dim);
      check_launch("decode_combine_kernel", out);
    }
  };
  if (q.dtype() == DType::kBF16) {
    run(__nv_bfloat16{});
  } else {
    run(__half{});
  }
}

}  // namespace

bool decode_supports(DType dtype, int head_dim) {
  return (dtype == DType::kBF16 || dtype == DType::kF16) && (head_dim == 64 || head_dim == 128 || head_dim == 256);
}

bool decode_fixed_supports(DType dtype, int head_dim) {
  return decode_supports(dtype, head_dim) ||
         ((dtype == DType::kBF16 || dtype == DType::kF16) && (head_dim == 16 || head_dim == 32));
}

void decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, std::span<const ops::PagedSequence> seqs,
            const Geometry& g, Tensor& out) {
  if (seqs.empty()) return;
  const int device = q.device().index;
  const DecodeLayout layout = decode_layout(g);
  DecodeParams p = layout.params;
  const int per_block = layout.per_block, step = layout.key_step;

  // Split the keys only as far as needed to give every multiprocessor a few blocks.
  std::vector<DecodeSeq> infos(seqs.size());
  int64_t longest = 1;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int length = seqs[i].context_len + 1;
    const int first = g.window > 0 ? std::max(0, length - g.window) : 0;
    infos[i] = {seqs[i].query_start, first, length, 0, 1, 0};
    longest = std::max<int64_t>(longest, length - first);
  }
  const int64_t base_blocks = static_cast<int64_t>(seqs.size()) * g.kv_heads * p.chunks;
  const int64_t target_blocks = 4 * static_cast<int64_t>(multiprocessor_count(device));
  int64_t partition = ceil_div(longest, step) * step;
  if (base_blocks < target_blocks) {
    const int64_t wanted = ceil_div(target_blocks, base_blocks);
    partition = std::max<int64_t>(kMinPartition, ceil_div(ceil_div(longest, wanted), step) * step);
  }
  p.partition = static_cast<int>(partition);

  std::vector<DecodeItem> items;
  std::vector<int32_t> tables;
  int64_t partials = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    DecodeSeq& info = infos[i];
    const int splits = static_cast<int>(std::max<int64_t>(1, ceil_div(info.length - info.first_key, partition)));
    info.table_offset = static_cast<int32_t>(tables.size());
    info.splits = splits;
    info.partial_offset = static_cast<int32_t>(splits > 1 ? partials : 0);
    if (splits > 1) partials += splits;
    const auto& table = seqs[i].block_table;
    tables.insert(tables.end(), table.begin(), table.begin() + ceil_div(info.length, g.block_size));
    for (int s = 0; s < splits; ++s) items.push_back({static_cast<int32_t>(i), s});
  }

  static_assert(sizeof(DecodeSeq) % 4 == 0 && sizeof(DecodeItem) % 4 == 0);
  std::vector<int32_t> packed;
  auto append = [&packed](const void* data, size_t bytes) {
    const auto* words = static_cast<const int32_t*>(data);
    packed.insert(packed.end(), words, words + bytes / 4);
  };
  append(infos.data(), infos.size() * sizeof(DecodeSeq));
  const size_t items_at = packed.size();
  append(items.data(), items.size() * sizeof(DecodeItem));
  const size_t tables_at = packed.size();
  append(tables.data(), tables.size() * 4);
  Tensor meta = Tensor::empty({static_cast<int64_t>(packed.size())}, DType::kI32, q.device());
  upload_async(meta.raw(), packed.data(), packed.size() * 4, device);
  const auto* words = static_cast<const int32_t*>(meta.raw());
  p.seqs = reinterpret_cast<const DecodeSeq*>(words);
  p.items = reinterpret_cast<const DecodeItem*>(words + items_at);
  p.tables = words + tables_at;

  Tensor partial_out, partial_ml;
  if (partials > 0) {
    partial_out = Tensor::empty({partials, g.heads, g.head_dim}, DType::kF32, q.device());
    partial_ml = Tensor::empty({partials, g.heads, 2}, DType::kF32, q.device());
    p.partial_out = static_cast<float*>(partial_out.raw());
    p.partial_ml = static_cast<float*>(partial_ml.raw());
  }

  launch_decode<false>(q, k_cache, v_cache, out, p, per_block, static_cast<unsigned>(items.size()),
                       static_cast<unsigned>(seqs.size()), partials > 0, g.head_dim);
}

void decode_fixed(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& context_lens,
                  const Tensor& block_tables, const Geometry& g, Tensor& out) {
  const int64_t rows = q.dim(0);
  if (rows == 0) return;
  const int device = q.device().index;
  const DecodeLayout layout = decode_layout(g);
  DecodeParams p = layout.params;
  const int per_block = layout.per_block, step = layout.key_step;
  p.context_lens = static_cast<const int32_t*>(context_lens.raw());
  p.tables = static_cast<const int32_t*>(block_tables.raw());
  p.table_width = static_cast<int>(block_tables.dim(1));
  p.window = g.window;
  p.num_blocks = static_cast<int>(k_cache.dim(0));
  p.errors = device_error_record(device);
  p.partition = static_cast<int>(ceil_div(kMinPartition, step) * step);

  // The split count depends only on the shapes (so a recorded launch fits every step of this batch
  // size): as many as give every multiprocessor a few blocks, no more than the longest context the
  // tables hold needs.
  const int64_t base_blocks = rows * g.kv_heads * p.chunks;
  const int64_t target_blocks = 4 * static_cast<int64_t>(multiprocessor_count(device));
  const int64_t longest = static_cast<int64_t>(p.table_width) * g.block_size;
  int64_t splits = 1;
  if (base_blocks < target_blocks) {
    splits = std::min(ceil_div(target_blocks, base_blocks), std::max<int64_t>(1, ceil_div(longest, p.partition)));
  }
  p.splits = static_cast<int>(splits);

  Tensor partial_out, partial_ml;
  if (splits > 1) {
    partial_out = Tensor::empty({rows * splits, g.heads, g.head_dim}, DType::kF32, q.device());
    partial_ml = Tensor::empty({rows * splits, g.heads, 2}, DType::kF32, q.device());
    p.partial_out = static_cast<float*>(partial_out.raw());
    p.partial_ml = static_cast<float*>(partial_ml.raw());
  }
  launch_decode<true>(q, k_cache, v_cache, out, p, per_block, static_cast<unsigned>(rows * splits),
                      static_cast<unsigned>(rows), splits > 1, g.head_dim);
}

}  // namespace omni::tensor::cuda::attention
