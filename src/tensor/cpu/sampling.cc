// sample() on the CPU: the penalties over the dispatcher's distinct tokens, then sample_row
// (tensor/sample_row.h) per row. The CUDA kernel (cuda/sampling.cu) finds the same thresholds by
// candidate sorting or bisection; here they are found by partial sorting.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/thread_pool.h"
#include "tensor/packed_sampling_params.h"
#include "tensor/philox.h"
#include "tensor/sample_row.h"

namespace omni::tensor {
namespace {

int32_t greedy(const float* row, int64_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

// The smallest logit of the top-p nucleus among the kept logits (>= threshold): walking them from
// the most likely down, the first at which the float32 mass reaches `target`. nullopt when rounding
// leaves the walk short of the target (everything kept stays). A trained model's nucleus is
// usually a few tokens near the top, so those above 1/1024 of the top probability are tried first;
// each round sorts only the next slice of a growing head.
std::optional<float> nucleus_floor(const float* row, int64_t n, float threshold, float xmax, float temperature,
                                   float target, std::vector<float>& scratch) {
  const float inv_t = 1.0f / temperature;
  auto walk = [&](float floor) -> std::optional<float> {
    scratch.clear();
    for (int64_t i = 0; i < n; ++i) {
      if (row[i] >= threshold && row[i] >= floor) scratch.push_back(row[i]);
    }
    float mass = 0.0f;
    size_t sorted = 0;
    while (sorted < scratch.size()) {
      const size_t head = std::min(std::max<size_t>(64, sorted * 4), scratch.size());
      std::nth_element(scratch.begin() + sorted, scratch.begin() + (head - 1), scratch.end(), std::greater<float>());
      std::sort(scratch.begin() + sorted, scratch.begin() + head, std::greater<float>());
      for (; sorted < head; ++sorted) {
        mass += std::exp((scratch[sorted] - xmax) * inv_t);
        if (mass >= target) return scratch[sorted];
      }
    }
    return std::nullopt;
  };
  constexpr float kLogNucleusFloor = -6.9314718f;  // ln(1/1024)
  if (std::optional<float> cut = walk(xmax + temperature * kLogNucleusFloor)) return cut;
  return walk(-std::numeric_limits<float>::infinity());
}

int32_t draw(const float* row, int64_t n, const ops::SamplingParams& p) {
  const float xmax = *std::max_element(row, row + n);
  if (!std::isfinite(xmax)) return greedy(row, n);
  const float inv_t = 1.0f / p.temperature;
  auto weight = [&](float v) { return std::exp((v - xmax) * inv_t); };
  thread_local std::vector<float> scratch;
  float threshold = -std::numeric_limits<float>::infinity();
  if (p.top_k > 0 && p.top_k < n) {
    scratch.assign(row, row + n);
    std::nth_element(scratch.begin(), scratch.begin() + (p.top_k - 1), scratch.end(), std::greater<float>());
    threshold = scratch[p.top_k - 1];
  }
  if (p.min_p > 0.0f) threshold = std::max(threshold, xmax + p.temperature * std::log(p.min_p));
  if (p.top_p < 1.0f) {
    float total = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      if (row[i] >= threshold) total += weight(row[i]);
    }
    if (std::optional<float> cut = nucleus_floor(row, n, threshold, xmax, p.temperature, p.top_p * total, scratch)) {
      threshold = std::max(threshold, *cut);
    }
  }
  float total = 0.0f;
  int32_t last = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (row[i] >= threshold) {
      total += weight(row[i]);
      last = static_cast<int32_t>(i);
    }
  }
  if (last < 0 || !(total > 0.0f) || !std::isfinite(total)) return greedy(row, n);
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

int32_t sample_row(std::span<const float> logits, const ops::SamplingParams& params) {
  const int64_t n = static_cast<int64_t>(logits.size());
  if (n == 0) return 0;
  return params.temperature <= 0.0f || params.top_k == 1 ? greedy(logits.data(), n) : draw(logits.data(), n, params);
}

namespace cpu {

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
    for (int64_t r = begin; r < end; ++r) out[r] = sample_row({x + r * n, static_cast<size_t>(n)}, params[r]);
  });
}

void sample_packed(const Tensor& logits, const Tensor& packed, uint64_t step_offset, Tensor& ids) {
  const int64_t n = logits.dim(1);
  const float* x = logits.data<float>();
  const auto* rows = reinterpret_cast<const PackedSamplingParams*>(packed.data<int32_t>());
  int32_t* out = ids.data<int32_t>();
  parallel_for(logits.dim(0), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      ops::SamplingParams p = unpack(rows[r]);
      p.step += step_offset;
      out[r] = sample_row({x + r * n, static_cast<size_t>(n)}, p);
    }
  });
}

}  // namespace cpu
}  // namespace omni::tensor
