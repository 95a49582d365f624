// The sampling fields of /v1/completions and /v1/chat/completions requests — OpenAI's and the
// extra ones vLLM accepts — validated for type and range here (the ranges the engine checks too,
// config/sampling_ranges.h), so that the error names the field, and passed on to the engine under
// vLLM's SamplingParams names.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "base/json.h"

namespace omni::server {

enum class SamplingEndpoint { kCompletions, kChatCompletions };

// Fields absent from the request are absent from the result (the engine applies its defaults),
// except where the endpoint's own default differs: /v1/completions' max_tokens is 16, as in
// OpenAI's and vLLM's API. For chat, `max_completion_tokens` wins over `max_tokens`, and
// `logprobs: true` with `top_logprobs: k` becomes `logprobs: k` (a count, as in completions).
// Throws InvalidField naming the first bad field, and for vLLM fields the engine does not implement
// (bad_words, allowed_token_ids, prompt_logprobs, structured outputs, best_of > n).
Json sampling_params_from_request(const Json& body, SamplingEndpoint endpoint);

// The "max_tokens" of parameters from sampling_params_from_request, when set.
std::optional<int64_t> max_tokens_of(const Json& sampling_params);

// vLLM's truncate_prompt_tokens (k >= 1): keeps the prompt's last k tokens. The server applies it;
// it is not a sampling parameter of the engine.
void apply_truncate_prompt_tokens(const Json& body, std::vector<int32_t>& prompt_token_ids);

}  // namespace omni::server
