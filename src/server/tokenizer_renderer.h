// The PromptRenderer of a real model: its Tokenizer and chat template (text/tokenizer,
// text/chat_template), rendering chat requests the way vLLM's OpenAI server does.
//
// Threads: immutable after load(); every method may run on many threads at once.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "server/prompt_renderer.h"
#include "text/chat_template/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace omni::server {

class TokenizerRenderer : public PromptRenderer {
 public:
  // Loads the tokenizer and the chat template of a model directory. A model without a chat
  // template still serves /v1/completions; its chat requests fail with a 400 that says so.
  // Throws what Tokenizer::load and ChatTemplate::load throw (kNotFound, kLoadFailed).
  // `content_format`: how list content reaches the template (chat_content.h); nullopt: "auto",
  // the template's own (ChatTemplate::content_format()).
  static std::unique_ptr<TokenizerRenderer> load(const std::filesystem::path& model_dir,
                                                 std::optional<text::ContentFormat> content_format = std::nullopt);
  TokenizerRenderer(std::unique_ptr<text::Tokenizer> tokenizer, std::optional<text::ChatTemplate> chat_template,
                    std::optional<text::ContentFormat> content_format = std::nullopt);

  // The content format chat requests are rendered with (kString without a chat template).
  text::ContentFormat content_format() const { return content_format_; }
  // The media kinds ("audio") the served model reads: their parts reach the template
  // (chat_content.h); others are refused. None until set; set before serving.
  void set_readable_media(std::vector<std::string> kinds) { readable_media_ = std::move(kinds); }

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int32_t>& token_ids, bool skip_special_tokens) const override;
  std::string token_text(int32_t token_id) const override;
  // vLLM's fields: add_generation_prompt (default true), continue_final_message (the prompt ends
  // inside the last message, which must then not get a generation prompt), chat_template_kwargs,
  // tools, add_special_tokens (default false).
  std::vector<int32_t> render_chat(const OrderedJson& request) const override;
  int32_t vocab_size() const override { return tokenizer_->vocab_size(); }

 private:
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::optional<text::ChatTemplate> chat_template_;
  text::ContentFormat content_format_ = text::ContentFormat::kString;
  std::vector<std::string> readable_media_;
};

}  // namespace omni::server
