#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/thread_pool.h"

namespace omni::tensor::cpu {

void store_kv(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_cache, Tensor& v_cache) {
  const int64_t row = k.dim(1) * k.dim(2);
  const int32_t* slot = slots.data<int32_t>();
  const float* ks = k.data<float>();
  const float* vs = v.data<float>();
  float* kc = k_cache.data<float>();
  float* vc = v_cache.data<float>();
  for (int64_t t = 0; t < k.dim(0); ++t) {
    std::memcpy(kc + slot[t] * row, ks + t * row, row * sizeof(float));
    std::memcpy(vc + slot[t] * row, vs + t * row, row * sizeof(float));
  }
}

void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     std::span<const ops::PagedSequence> seqs, float scale, int sliding_window, Tensor& out) {
  const int64_t heads = q.dim(1);
  const int64_t head_dim = q.dim(2);
  const int64_t block_size = k_cache.dim(1);
  const int64_t kv_heads = k_cache.dim(2);
  const int64_t group = heads / kv_heads;
  const float* qs = q.data<float>();
  const float* kc = k_cache.data<float>();
  const float* vc = v_cache.data<float>();
  float* os = out.data<float>();

  // One work item per (query row, head); rows map back to their sequence.
  std::vector<int32_t> row_seq(q.dim(0), -1);
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int32_t i = 0; i < seqs[s].query_len; ++i) row_seq[seqs[s].query_start + i] = static_cast<int32_t>(s);
  }
  const int64_t items = q.dim(0) * heads;
  parallel_for(items, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    std::vector<float> acc(head_dim);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row = item / heads;
      const int64_t head = item % heads;
      float* o = os + (row * heads + head) * head_dim;
      if (row_seq[row] < 0) {
        std::memset(o, 0, head_dim * sizeof(float));
        continue;
      }
      const ops::PagedSequence& seq = seqs[row_seq[row]];
      const int64_t pos = seq.context_len + (row - seq.query_start);
      const int64_t first = sliding_window > 0 ? std::max<int64_t>(0, pos - sliding_window + 1) : 0;
      const int64_t kvh = head / group;
      const float* qv = qs + (row * heads + head) * head_dim;
      scores.resize(pos - first + 1);
      float max_score = -INFINITY;
      for (int64_t j = first; j <= pos; ++j) {
        const int64_t slot = static_cast<int64_t>(seq.block_table[j / block_size]) * block_size + j % block_size;
        const float* kv = kc + (slot * kv_heads + kvh) * head_dim;
        float dot = 0.0f;
        for (int64_t d = 0; d < head_dim; ++d) dot += qv[d] * kv[d];
        dot *= scale;
        scores[j - first] = dot;
        max_score = std::max(max_score, dot);
      }
      float sum = 0.0f;
      for (float& s : scores) {
        s = std::exp(s - max_score);
        sum += s;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = first; j <= pos; ++j) {
        const int64_t slot = static_cast<int64_t>(seq.block_table[j / block_size]) * block_size + j % block_size;
        const float* vv = vc + (slot * kv_heads + kvh) * head_dim;
        const float w = scores[j - first];
        for (int64_t d = 0; d < head_dim; ++d) acc[d] += w * vv[d];
      }
      const float inv = 1.0f / sum;
      for (int64_t d = 0; d < head_dim; ++d) o[d] = acc[d] * inv;
    }
  });
}

// The same computation as paged_attention with one-token sequences; padding rows own no sequence,
// so paged_attention zeroes them.
void paged_decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& context_lens,
                            const Tensor& block_tables, float scale, int sliding_window, Tensor& out) {
  const int64_t width = block_tables.dim(1), block_size = k_cache.dim(1);
  const int32_t* lens = context_lens.data<int32_t>();
  const int32_t* tables = block_tables.data<int32_t>();
  std::vector<ops::PagedSequence> seqs;
  for (int64_t b = 0; b < q.dim(0); ++b) {
    if (lens[b] < 0) continue;
    const auto needed = static_cast<size_t>((lens[b] + block_size) / block_size);
    seqs.push_back({static_cast<int32_t>(b), 1, lens[b], std::span<const int32_t>(tables + b * width, needed)});
  }
  cpu::paged_attention(q, k_cache, v_cache, seqs, scale, sliding_window, out);
}

}  // namespace omni::tensor::cpu
