#include "engine/logits_processors.h"

#include <cassert>
#include <limits>

namespace omni::engine {

void apply_min_tokens(std::span<float> logits, int num_output_tokens, int min_tokens,
                      std::span<const int32_t> stop_token_ids) {
  if (num_output_tokens >= min_tokens) return;
  for (int32_t token : stop_token_ids) {
    if (token >= 0 && static_cast<size_t>(token) < logits.size()) {
      logits[token] = -std::numeric_limits<float>::infinity();
    }
  }
}

void apply_logit_bias(std::span<float> logits, const std::map<int32_t, float>& logit_bias) {
  for (const auto& [token, bias] : logit_bias) {
    assert(token >= 0 && static_cast<size_t>(token) < logits.size());
    logits[token] += bias;
  }
}

void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt_token_ids,
                     std::span<const int32_t> output_token_ids, float repetition_penalty, float frequency_penalty,
                     float presence_penalty, PenaltyScratch& scratch) {
  bool repetition = repetition_penalty != 1.0f;
  bool output_penalties = frequency_penalty != 0.0f || presence_penalty != 0.0f;
  if (!repetition && !output_penalties) return;
  if (scratch.output_counts.size() < logits.size()) {
    scratch.output_counts.assign(logits.size(), 0);
    scratch.penalised.assign(logits.size(), 0);
  }

  if (repetition) {
    // Each distinct token is penalised once, however often it occurs.
    auto penalise = [&](int32_t token) {
      if (scratch.penalised[token]) return;
      scratch.penalised[token] = 1;
      float& logit = logits[token];
      logit = logit > 0 ? logit / repetition_penalty : logit * repetition_penalty;
    };
    for (int32_t token : prompt_token_ids) penalise(token);
    for (int32_t token : output_token_ids) penalise(token);
    for (int32_t token : prompt_token_ids) scratch.penalised[token] = 0;
    for (int32_t token : output_token_ids) scratch.penalised[token] = 0;
  }

  if (output_penalties) {
    for (int32_t token : output_token_ids) ++scratch.output_counts[token];
    for (int32_t token : output_token_ids) {
      int32_t& count = scratch.output_counts[token];
      if (count == 0) continue;  // already applied for an earlier occurrence
      logits[token] -= frequency_penalty * static_cast<float>(count);
      logits[token] -= presence_penalty;
      count = 0;
    }
  }
}

}  // namespace omni::engine
