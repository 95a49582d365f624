// The sampling parameters of one request: every field of vLLM's SamplingParams that a client of
// the OpenAI API can set, with vLLM's names, defaults, normalisation and validation rules, so that a
// request that vLLM accepts or rejects is accepted or rejected here with the same meaning.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"
#include "config/sampling_ranges.h"

namespace omni::engine {

// The most top logprobs a request may ask for per token (vLLM's default max_logprobs).
inline constexpr int kMaxLogprobs = config::kMaxLogprobs;
// Temperatures below this are greedy sampling (vLLM's _SAMPLING_EPS).
inline constexpr float kGreedyTemperature = 1e-5f;
// Temperatures in (0, kMinTemperature) are raised to it to keep softmax finite (vLLM's _MAX_TEMP).
inline constexpr float kMinTemperature = 1e-2f;

struct SamplingParams {
  // Completions generated from the prompt; each gets its own sequence and, when `seed` is set,
  // the seed `seed + index` (as vLLM's parallel sampling does).
  int n = 1;
  float temperature = 1.0f;  // 0 (below kGreedyTemperature) = greedy
  float top_p = 1.0f;        // in (0, 1]
  int top_k = 0;             // 0 or -1 = all tokens
  float min_p = 0.0f;        // in [0, 1]
  // Over output tokens only: logit -= presence * [count > 0] + frequency * count.
  float presence_penalty = 0.0f;   // in [-2, 2]
  float frequency_penalty = 0.0f;  // in [-2, 2]
  // Over prompt and output tokens: positive logits are divided by it, the others multiplied.
  float repetition_penalty = 1.0f;  // > 0
  // Added to the logit of the token before penalties; token ids are checked against the vocabulary
  // when the request reaches an engine.
  std::map<int32_t, float> logit_bias;
  // A per-request random stream: the same seed gives the same output whatever else is batched.
  std::optional<int64_t> seed;
  // Stop strings, matched on the detokenized output (also across token boundaries).
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  bool ignore_eos = false;
  int min_tokens = 0;  // EOS and stop_token_ids are masked out until this many tokens exist
  // Output tokens at most; absent = until the sequence reaches the engine's max_model_len.
  std::optional<int> max_tokens;
  // Per sampled token: its logprob and rank plus this many most likely tokens (0 = only the sampled
  // one); absent = no logprobs. Logprobs are those of the model's raw logits (vLLM's default
  // logprobs_mode "raw_logprobs"), before penalties, bias and temperature.
  std::optional<int> logprobs;
  bool skip_special_tokens = true;

  bool greedy() const { return temperature < kGreedyTemperature; }
};

// Checks every field against vLLM's rules (the ranges of config/sampling_ranges.h) and applies vLLM's normalisation: a
// greedy request gets top_p 1, top_k 0 and min_p 0; a temperature in (0, kMinTemperature) becomes kMinTemperature.
// Throws omni::Error(kInvalidArgument) naming the parameter, its value and the allowed range.
SamplingParams validated(SamplingParams params);

// Reads a JSON object of vLLM SamplingParams fields (e.g. a prompts-file line's
// "sampling_params") over `base`: fields present replace base's, JSON null restores the default
// of an optional field. Unknown fields and wrong types throw omni::Error(kInvalidArgument) naming
// `source` and the field. The result is not yet validated.
SamplingParams sampling_params_from_json(const Json& object, SamplingParams base, std::string_view source);

}  // namespace omni::engine
