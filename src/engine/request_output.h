// What an engine reports about a request: incremental deltas of each completion (new token ids,
// new text, their logprobs) and, at the end, why each completion finished.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/error.h"
#include "engine/sampler.h"

namespace omni::engine {

// OpenAI's finish_reason values: stop (EOS, a stop token or a stop string), length (max_tokens or
// max_model_len), abort (the client went away, the engine stopped, or the engine failed).
enum class FinishReason { kStop, kLength, kAbort };

// "stop", "length", "abort".
std::string_view finish_reason_name(FinishReason reason);

// vLLM's stop_reason: the stop token id or stop string that ended a completion; empty for EOS,
// length and abort.
using StopReason = std::variant<std::monostate, int32_t, std::string>;

struct CompletionOutput {
  int index = 0;                   // which of the request's n completions
  std::vector<int32_t> token_ids;  // sampled since this completion's previous output
  // Text that became final since the previous output (empty without a detokenizer). While a request
  // has stop strings, the last (longest stop string - 1) bytes are held back until they are known
  // not to start one; a finished completion's outputs add up to its whole text.
  std::string text;
  std::vector<SampledToken> logprobs;         // one per entry of token_ids when the request asked for logprobs
  std::optional<FinishReason> finish_reason;  // set on the completion's last output
  StopReason stop_reason;
  // With an embedding-input model that has per-step outputs (model/embedding_input_lm.h): one per entry of
  // token_ids, the bytes its step produced (empty: none).
  std::vector<std::vector<uint8_t>> step_outputs;
};

struct RequestOutput {
  std::string request_id;
  // The completions that advanced or finished in this step, by index.
  std::vector<CompletionOutput> completions;
  // Every completion has finished: this is the request's last output.
  bool finished = false;
  int num_prompt_tokens = 0;
  // Set when the request failed inside the engine (its completions finish with kAbort).
  std::optional<Error> error;
};

}  // namespace omni::engine
