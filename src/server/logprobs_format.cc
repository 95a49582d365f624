#include "server/logprobs_format.h"

#include <algorithm>
#include <string>

#include "base/utf8.h"

namespace omni::server {
namespace {

constexpr double kLowestLogprob = -9999.0;

std::string token_string(int32_t token_id, const PromptRenderer* renderer) {
  if (!renderer) return "token_id:" + std::to_string(token_id);
  return renderer->decode({token_id}, /*skip_special_tokens=*/false);
}

double json_logprob(float logprob) { return std::max(static_cast<double>(logprob), kLowestLogprob); }

Json utf8_bytes(const std::string& text) {
  Json bytes = Json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace

Json chat_logprobs_content(const std::vector<runtime::GeneratedTokenLogprobs>& logprobs,
                           const PromptRenderer* renderer) {
  Json content = Json::array();
  for (const runtime::GeneratedTokenLogprobs& entry : logprobs) {
    std::string token = token_string(entry.token.token_id, renderer);
    Json top = Json::array();
    for (const runtime::TokenLogprob& alternative : entry.top) {
      std::string text = token_string(alternative.token_id, renderer);
      top.push_back({{"token", text}, {"logprob", json_logprob(alternative.logprob)}, {"bytes", utf8_bytes(text)}});
    }
    content.push_back({{"token", token},
                       {"logprob", json_logprob(entry.token.logprob)},
                       {"bytes", utf8_bytes(token)},
                       {"top_logprobs", std::move(top)}});
  }
  return content;
}

void CompletionLogprobs::append(const std::vector<runtime::GeneratedTokenLogprobs>& logprobs,
                                const PromptRenderer* renderer) {
  for (const runtime::GeneratedTokenLogprobs& entry : logprobs) {
    std::string token = token_string(entry.token.token_id, renderer);
    // As in vLLM: the sampled token and the request's `logprobs` most likely ones.
    Json top = Json::object();
    top[token] = json_logprob(entry.token.logprob);
    for (const runtime::TokenLogprob& alternative : entry.top) {
      top[token_string(alternative.token_id, renderer)] = json_logprob(alternative.logprob);
    }
    tokens_.push_back(token);
    token_logprobs_.push_back(json_logprob(entry.token.logprob));
    top_logprobs_.push_back(std::move(top));
    text_offset_.push_back(next_text_offset_);
    next_text_offset_ += code_points(token);
  }
}

Json CompletionLogprobs::to_json() const {
  return {{"tokens", tokens_},
          {"token_logprobs", token_logprobs_},
          {"top_logprobs", top_logprobs_},
          {"text_offset", text_offset_}};
}

}  // namespace omni::server
