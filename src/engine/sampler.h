// Token selection for one sequence from its row of logits on the host, with vLLM's semantics:
//   raw logprobs (when asked) -> min_tokens -> logit_bias -> penalties ->
//   greedy: argmax (lowest id on ties) | random: temperature -> min_p -> top_k -> top_p -> draw.
// top_k keeps every token whose logit ties the k-th largest; top_p keeps the most likely tokens
// while the probability mass before them is below top_p (always at least one); min_p drops tokens
// whose probability is below min_p times the largest. The token choice after the penalties is
// ops::sample's, through its host definition tensor::sample_row, with the sequence's next draw
// (SamplingRng: Philox, seed and step): the engine samples on the model's device with ops::sample
// when no row of a step needs what only this sampler does (logprobs, logit_bias, min_tokens), and
// both paths continue the same stream, so a seeded sequence's tokens depend only on its own logits
// and seed.
//
// A Sampler holds scratch buffers only; one per thread (the engine thread).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/logits_processors.h"
#include "engine/sampling_params.h"
#include "engine/sampling_rng.h"
#include "tensor/ops.h"

namespace omni::engine {

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0;
};

struct SampledToken {
  int32_t token_id = 0;
  // Only when the request asked for logprobs; from the model's raw logits (log-softmax).
  float logprob = 0;
  int rank = 0;                            // 1 + the number of other tokens at least as likely
  std::vector<TokenLogprob> top_logprobs;  // the `logprobs` most likely tokens, most likely first
};

// What the sampler needs to know about one sequence besides its logits.
struct SamplingState {
  const SamplingParams& params;
  std::span<const int32_t> prompt_token_ids;
  std::span<const int32_t> output_token_ids;
  // Tokens that min_tokens keeps from being sampled: EOS (unless ignore_eos) and stop_token_ids.
  std::span<const int32_t> stop_token_ids;
  SamplingRng& rng;
};

// The ops::sample parameters of one sequence's next token: its filters, penalties and token
// history (spans into the caller's vectors) and the next draw of `rng` (seed, step), without
// taking it. `params` must have gone through validated().
tensor::ops::SamplingParams device_sampling_params(const SamplingParams& params, std::span<const int32_t> prompt,
                                                   std::span<const int32_t> output, const SamplingRng& rng);

class Sampler {
 public:
  // Processes `logits` (one row of vocab_size) and returns the chosen token. The row is left holding
  // the logits after min_tokens, logit_bias and penalties. `state.params` must have gone through
  // validated().
  SampledToken sample(std::span<float> logits, const SamplingState& state);

 private:
  void fill_logprobs(std::span<const float> raw, int num_top, SampledToken& out);

  PenaltyScratch penalty_scratch_;
  std::vector<float> raw_logits_;
};

}  // namespace omni::engine
