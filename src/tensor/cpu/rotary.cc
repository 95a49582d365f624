#include <algorithm>
#include <cmath>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/thread_pool.h"

namespace omni::tensor::cpu {
namespace {

// Which position stream (0 = t, 1 = h, 2 = w) drives frequency slot `slot`.
int stream_of_slot(const ops::RopeSpec& spec, int slot) {
  const auto& s = spec.mrope_section;
  switch (spec.layout) {
    case ops::RopeLayout::kNeox:
      return 0;
    case ops::RopeLayout::kMropeSectioned:
      if (slot < s[0]) return 0;
      if (slot < s[0] + s[1]) return 1;
      if (slot < s[0] + s[1] + s[2]) return 2;
      return 0;
    case ops::RopeLayout::kMropeInterleaved:
      if (slot % 3 == 1 && slot < 3 * s[1]) return 1;
      if (slot % 3 == 2 && slot < 3 * s[2]) return 2;
      return 0;
  }
  return 0;
}

}  // namespace

void rotary_embedding(Tensor& x, const Tensor& positions, const ops::RopeSpec& spec) {
  const int64_t tokens = x.dim(0);
  const int64_t heads = x.dim(1);
  const int head_dim = static_cast<int>(x.dim(2));
  const int half = head_dim / 2;
  std::vector<float> inv_freq(half);
  std::vector<int> stream(half);
  for (int i = 0; i < half; ++i) {
    inv_freq[i] = 1.0f / std::pow(spec.theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
    stream[i] = stream_of_slot(spec, i);
  }
  // Integer positions, or float ones (fractional M-RoPE positions), read as float32.
  const bool float_positions = positions.dtype() == DType::kF32;
  const int32_t* pos = float_positions ? nullptr : positions.data<int32_t>();
  const float* fpos = float_positions ? positions.data<float>() : nullptr;
  const int64_t stream_stride = positions.rank() == 2 ? tokens : 0;
  float* data = x.data<float>();
  parallel_for(tokens, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> cos_t(half), sin_t(half);
    for (int64_t t = begin; t < end; ++t) {
      for (int i = 0; i < half; ++i) {
        const int64_t at = stream[i] * stream_stride + t;
        const float angle = (float_positions ? fpos[at] : static_cast<float>(pos[at])) * inv_freq[i];
        cos_t[i] = std::cos(angle);
        sin_t[i] = std::sin(angle);
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* v = data + (t * heads + h) * head_dim;
        for (int i = 0; i < half; ++i) {
          const float x1 = v[i];
          const float x2 = v[i + half];
          v[i] = x1 * cos_t[i] - x2 * sin_t[i];
          v[i + half] = x2 * cos_t[i] + x1 * sin_t[i];
        }
      }
    }
  });
}

// float32 throughout, so normalising and rotating in two passes rounds nothing in between.
void qk_norm_rope(Tensor& q, Tensor& k, const Tensor& q_norm, const Tensor& k_norm, float eps, const Tensor& positions,
                  float theta) {
  if (q_norm.defined()) {
    cpu::rms_norm(q, q_norm, eps, q);
    cpu::rms_norm(k, k_norm, eps, k);
  }
  ops::RopeSpec spec;
  spec.theta = theta;
  cpu::rotary_embedding(q, positions, spec);
  cpu::rotary_embedding(k, positions, spec);
}

// The heads are copied out of qkv into contiguous q, k and v and run through the unfused ops: on
// the CPU the copy costs nothing next to the products, and the results are the unfused ones exactly.
void qkv_norm_rope_store(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps,
                         const Tensor& positions, float theta, const Tensor& slots, Tensor& q_out, Tensor& k_cache,
                         Tensor& v_cache) {
  const int64_t tokens = qkv.dim(0), head_dim = qkv.dim(2), heads = q_out.dim(1), kv_heads = k_cache.dim(2);
  const int64_t q_row = heads * head_dim, kv_row = kv_heads * head_dim, row = q_row + 2 * kv_row;
  Tensor k = Tensor::empty({tokens, kv_heads, head_dim}, DType::kF32);
  Tensor v = Tensor::empty({tokens, kv_heads, head_dim}, DType::kF32);
  const float* src = qkv.data<float>();
  for (int64_t t = 0; t < tokens; ++t) {
    const float* r = src + t * row;
    std::copy_n(r, q_row, q_out.data<float>() + t * q_row);
    std::copy_n(r + q_row, kv_row, k.data<float>() + t * kv_row);
    std::copy_n(r + q_row + kv_row, kv_row, v.data<float>() + t * kv_row);
  }
  qk_norm_rope(q_out, k, q_norm, k_norm, eps, positions, theta);
  store_kv(k, v, slots, k_cache, v_cache);
}

}  // namespace omni::tensor::cpu
