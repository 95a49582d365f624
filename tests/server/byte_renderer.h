// A PromptRenderer for the HTTP tests: token id = byte value (0-255), 256 is the BOS special
// token, ids up to vocab_size-1 exist but have no text. The "chat template" writes
// "<role>: <content>\n" per message and "assistant: " when a generation prompt is asked for.
#pragma once

#include "server/prompt_renderer.h"

namespace omni::testing {

class ByteRenderer : public server::PromptRenderer {
 public:
  static constexpr int32_t kBos = 256;
  explicit ByteRenderer(int32_t vocab_size = 512) : vocab_size_(vocab_size) {}

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int32_t>& token_ids, bool skip_special_tokens) const override;
  std::string token_text(int32_t token_id) const override;
  std::vector<int32_t> render_chat(const OrderedJson& request) const override;
  int32_t vocab_size() const override { return vocab_size_; }

  // The text render_chat tokenizes, for tests to compute the expected prompt length.
  static std::string chat_text(const OrderedJson& request);

 private:
  int32_t vocab_size_;
};

}  // namespace omni::testing
