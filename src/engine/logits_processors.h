// The logit transformations that run before token selection, with vLLM's exact definitions and in
// vLLM's order (Sampler applies them): min_tokens masking, logit_bias, then penalties. Each
// function edits one sequence's row of vocab_size logits in place.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

namespace omni::engine {

// While `num_output_tokens < min_tokens`, sets the logits of `stop_token_ids` (EOS unless
// ignore_eos, plus the request's stop_token_ids) to -inf so that the sequence cannot stop early.
void apply_min_tokens(std::span<float> logits, int num_output_tokens, int min_tokens,
                      std::span<const int32_t> stop_token_ids);

// logits[token] += bias for every entry. Token ids must be inside the vocabulary (the engine checks
// requests when they arrive).
void apply_logit_bias(std::span<float> logits, const std::map<int32_t, float>& logit_bias);

// Reusable buffers for apply_penalties, grown to the vocabulary on first use (so that a step does
// no allocation); one per thread.
struct PenaltyScratch {
  std::vector<int32_t> output_counts;
  std::vector<uint8_t> penalised;
};

// vLLM's penalties, in its order:
//  1. repetition: for every token in prompt ∪ output, a logit > 0 is divided by
//     `repetition_penalty` and a logit <= 0 multiplied by it;
//  2. frequency: logit -= frequency_penalty * (times the token occurs in the output);
//  3. presence: logit -= presence_penalty for every token that occurs in the output.
void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt_token_ids,
                     std::span<const int32_t> output_token_ids, float repetition_penalty, float frequency_penalty,
                     float presence_penalty, PenaltyScratch& scratch);

}  // namespace omni::engine
