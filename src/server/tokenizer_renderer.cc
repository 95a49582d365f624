#include "server/tokenizer_renderer.h"

#include "server/chat_content.h"
#include "server/openai_error.h"

namespace omni::server {

std::unique_ptr<TokenizerRenderer> TokenizerRenderer::load(const std::filesystem::path& model_dir,
                                                           std::optional<text::ContentFormat> content_format) {
  auto tokenizer = text::Tokenizer::load(model_dir);
  auto chat_template = text::ChatTemplate::load(model_dir);
  return std::make_unique<TokenizerRenderer>(std::move(tokenizer), std::move(chat_template), content_format);
}

TokenizerRenderer::TokenizerRenderer(std::unique_ptr<text::Tokenizer> tokenizer,
                                     std::optional<text::ChatTemplate> chat_template,
                                     std::optional<text::ContentFormat> content_format)
    : tokenizer_(std::move(tokenizer)), chat_template_(std::move(chat_template)) {
  if (content_format) {
    content_format_ = *content_format;
  } else if (chat_template_) {
    content_format_ = chat_template_->content_format();
  }
}

std::vector<int32_t> TokenizerRenderer::encode(std::string_view text, bool add_special_tokens) const {
  return tokenizer_->encode(text, add_special_tokens);
}

std::string TokenizerRenderer::decode(const std::vector<int32_t>& token_ids, bool skip_special_tokens) const {
  return tokenizer_->decode(token_ids, skip_special_tokens);
}

std::string TokenizerRenderer::token_text(int32_t token_id) const {
  return tokenizer_->id_to_token(token_id).value_or("");
}

std::vector<int32_t> TokenizerRenderer::render_chat(const OrderedJson& request) const {
  if (!chat_template_) {
    throw_invalid_field("messages",
                        "this model has no chat template (chat_template.jinja or tokenizer_config.json's "
                        "chat_template); use /v1/completions");
  }
  auto flag = [&](const char* name, bool fallback) {
    auto it = request.find(name);
    if (it == request.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) throw_invalid_field(name, "'{}' must be a boolean", name);
    return it->get<bool>();
  };
  bool continue_final = flag("continue_final_message", false);
  bool add_generation_prompt = flag("add_generation_prompt", !continue_final);
  if (continue_final && add_generation_prompt) {
    throw_invalid_field("continue_final_message",
                        "'continue_final_message' and 'add_generation_prompt' cannot both be true");
  }
  const OrderedJson messages = prepare_message_content(request.at("messages"), content_format_, readable_media_);
  OrderedJson tools = nullptr;
  if (auto it = request.find("tools"); it != request.end() && !it->is_null()) tools = *it;
  OrderedJson kwargs = OrderedJson::object();
  if (auto it = request.find("chat_template_kwargs"); it != request.end() && !it->is_null()) {
    if (!it->is_object()) throw_invalid_field("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    kwargs = *it;
  }
  std::string prompt = chat_template_->apply(messages, tools, add_generation_prompt, kwargs);
  if (continue_final) {
    // As transformers does: the prompt ends where the final message's text ends, so the model
    // continues that message instead of closing it.
    const OrderedJson& last = messages.back();
    std::string content =
        last.contains("content") && last["content"].is_string() ? last["content"].get<std::string>() : "";
    size_t end = content.empty() ? std::string::npos : prompt.rfind(content);
    if (end == std::string::npos) {
      throw_invalid_field("continue_final_message",
                          "the final message's text does not appear in the rendered chat template");
    }
    prompt.resize(end + content.size());
  }
  return tokenizer_->encode(prompt, flag("add_special_tokens", false));
}

}  // namespace omni::server
