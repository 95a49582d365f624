// sample() on the CPU: the same steps and the same Philox uniforms as the CUDA kernel
// (cuda/sampling.cu), with thresholds found by sorting instead of bisection.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/thread_pool.h"
#include "tensor/philox.h"

namespace omni::tensor::cpu {
namespace {

int32_t greedy(const float* row, int64_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

int32_t draw(const float* row, int64_t n, const ops::SamplingParams& p) {
  const float xmax = *std::max_element(row, row + n);
  const float inv_t = 1.0f / p.temperature;
  auto weight = [&](float v) { return std::exp((v - xmax) * inv_t); };
  float threshold = -std::numeric_limits<float>::infinity();
  if (p.top_k > 0 && p.top_k < n) {
    std::vector<float> values(row, row + n);
    std::nth_element(values.begin(), values.begin() + (p.top_k - 1), values.end(), std::greater<float>());
    threshold = values[p.top_k - 1];
  }
  if (p.min_p > 0.0f) threshold = std::max(threshold, xmax + p.temperature * std::log(p.min_p));
  if (p.top_p < 1.0f) {
    std::vector<float> kept;
    for (int64_t i = 0; i < n; ++i)
      if (row[i] >= threshold) kept.push_back(row[i]);
    std::sort(kept.begin(), kept.end(), std::greater<float>());
    float total = 0.0f;
    for (float v : kept) total += weight(v);
    const float target = p.top_p * total;
    float mass = 0.0f;
    for (float v : kept) {
      mass += weight(v);
      if (mass >= target) {
        threshold = std::max(threshold, v);
        break;
      }
    }
  }
  float total = 0.0f;
  int32_t last = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (row[i] >= threshold) {
      total += weight(row[i]);
      last = static_cast<int32_t>(i);
    }
  }
  const float target = philox_uniform(p.seed, p.step) * total;
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (row[i] < threshold) continue;
    acc += weight(row[i]);
    if (acc > target) return static_cast<int32_t>(i);
  }
  return last;  // rounding left the target at the very end of the mass
}

}  // namespace

void sample(Tensor& logits, std::span<const ops::SamplingParams> params, std::span<const PenalisedToken> penalties,
            Tensor& ids) {
  const int64_t n = logits.dim(1);
  float* x = logits.data<float>();
  for (const PenalisedToken& t : penalties) {
    const ops::SamplingParams& p = params[t.row];
    float& v = x[t.row * n + t.token];
    if (p.repetition_penalty != 1.0f) v = v > 0.0f ? v / p.repetition_penalty : v * p.repetition_penalty;
    v -= p.frequency_penalty * static_cast<float>(t.output_count) + (t.output_count > 0 ? p.presence_penalty : 0.0f);
  }
  int32_t* out = ids.data<int32_t>();
  parallel_for(logits.dim(0), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const ops::SamplingParams& p = params[r];
      const float* row = x + r * n;
      out[r] = p.temperature <= 0.0f || p.top_k == 1 ? greedy(row, n) : draw(row, n, p);
    }
  });
}

}  // namespace omni::tensor::cpu
