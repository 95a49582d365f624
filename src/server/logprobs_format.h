// The OpenAI shapes of generated tokens' logprobs, from the backend's GeneratedTokenLogprobs:
//   chat:        choice.logprobs = {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}
//   completions: choice.logprobs = {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}
// As in vLLM, a token's string is its own decoded text (special tokens included), or "token_id:N"
// when `renderer` is null (no tokenizer, or the request's return_tokens_as_token_ids); -inf
// logprobs become -9999.0 (JSON has no infinity).
//
// Threads: plain values, used on one connection's executor.
#pragma once

#include <string>
#include <vector>

#include "base/json.h"
#include "runtime/token_logprobs.h"
#include "server/prompt_renderer.h"

namespace omni::server {

// The entries of a chat choice's logprobs.content for these tokens. `renderer` may be null.
Json chat_logprobs_content(const std::vector<runtime::GeneratedTokenLogprobs>& logprobs,
                           const PromptRenderer* renderer);

// A completion choice's logprobs (or a streamed chunk's part of them). Each token's text_offset is
// where its string starts in the choice's text, in characters (code points, `omni::code_points`, as
// Python's len in vLLM): the first at `text_offset` (the text before it, an echoed prompt included),
// each next one after the previous token's string, as vLLM counts them.
class CompletionLogprobs {
 public:
  explicit CompletionLogprobs(size_t text_offset = 0) : next_text_offset_(text_offset) {}

  void append(const std::vector<runtime::GeneratedTokenLogprobs>& logprobs, const PromptRenderer* renderer);
  size_t next_text_offset() const { return next_text_offset_; }
  Json to_json() const;

 private:
  size_t next_text_offset_;
  Json tokens_ = Json::array();
  Json token_logprobs_ = Json::array();
  Json top_logprobs_ = Json::array();
  Json text_offset_ = Json::array();
};

}  // namespace omni::server
