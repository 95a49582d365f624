// The allowed values of the numeric sampling parameters (vLLM's SamplingParams rules), stated once
// for every reader of them: the HTTP server checks request fields against these (an error naming
// the field, HTTP 400), the engine checks the parameters it is given (prompts files, CLI flags,
// stage defaults) against the same ones.
#pragma once

#include <limits>
#include <string_view>

namespace omni::config {

struct SamplingRange {
  std::string_view field;  // vLLM's SamplingParams name
  double min = 0;
  bool min_inclusive = true;
  double max = std::numeric_limits<double>::infinity();  // inclusive
  // How an error states the range, after "must be": "in (0, 1]", ">= 0", "at least 1".
  std::string_view rule;

  // False for NaN and infinities: no parameter takes them.
  bool contains(double value) const;
};

// The most top logprobs a request may ask for per token (vLLM's default max_logprobs).
inline constexpr int kMaxLogprobs = 20;
// The most completions one request may ask for (OpenAI's bound on `n`): each is a sequence of its
// own in the engine, so an unbounded n is an unbounded amount of work and memory for one request.
inline constexpr int kMaxN = 128;
// Stop strings: how many one request may give and how long each may be (bytes). Every generated
// token is matched against all of them, and streamed text is held back by the longest one.
inline constexpr int kMaxStopStrings = 64;
inline constexpr int kMaxStopStringBytes = 1024;

inline constexpr SamplingRange kSamplingN{"n", 1, true, kMaxN, "in [1, 128]"};
inline constexpr SamplingRange kTemperature{"temperature", 0, true, std::numeric_limits<double>::infinity(), ">= 0"};
inline constexpr SamplingRange kTopP{"top_p", 0, false, 1, "in (0, 1]"};
inline constexpr SamplingRange kTopK{"top_k", -1, true, std::numeric_limits<double>::infinity(),
                                     "-1 or 0 (all tokens) or at least 1"};
inline constexpr SamplingRange kMinP{"min_p", 0, true, 1, "in [0, 1]"};
inline constexpr SamplingRange kPresencePenalty{"presence_penalty", -2, true, 2, "in [-2, 2]"};
inline constexpr SamplingRange kFrequencyPenalty{"frequency_penalty", -2, true, 2, "in [-2, 2]"};
inline constexpr SamplingRange kRepetitionPenalty{"repetition_penalty", 0, false,
                                                  std::numeric_limits<double>::infinity(), "> 0"};
inline constexpr SamplingRange kMinTokens{"min_tokens", 0, true, std::numeric_limits<double>::infinity(), ">= 0"};
inline constexpr SamplingRange kMaxTokens{"max_tokens", 1, true, std::numeric_limits<double>::infinity(), "at least 1"};
// A count of top logprobs per token: the server's `logprobs` (completions) and `top_logprobs`
// (chat), the engine's `logprobs`.
inline constexpr SamplingRange kLogprobs{"logprobs", 0, true, kMaxLogprobs, "in [0, 20]"};

}  // namespace omni::config
