// The logprobs of generated tokens as they travel from a stage's engine through the stage protocol
// and the orchestrator to the HTTP server (which cannot see engine types): per generated token, its
// own logprob and rank and, when the request asked for top_logprobs, the most likely tokens at its
// position. Values are the model's raw log-softmax (vLLM's default logprobs_mode).
#pragma once

#include <cstdint>
#include <vector>

namespace omni::runtime {

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0;
};

struct GeneratedTokenLogprobs {
  TokenLogprob token;             // the generated token
  int rank = 0;                   // 1 + the number of other tokens at least as likely
  std::vector<TokenLogprob> top;  // the request's `logprobs` most likely tokens, most likely first
};

}  // namespace omni::runtime
