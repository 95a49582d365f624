#include "server/byte_renderer.h"

namespace omni::testing {

std::vector<int32_t> ByteRenderer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  if (add_special_tokens) ids.push_back(kBos);
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

std::string ByteRenderer::decode(const std::vector<int32_t>& token_ids, bool skip_special_tokens) const {
  std::string text;
  for (int32_t id : token_ids) {
    if (id < 256) {
      text += static_cast<char>(id);
    } else if (!skip_special_tokens) {
      text += token_text(id);
    }
  }
  return text;
}

std::string ByteRenderer::token_text(int32_t token_id) const {
  if (token_id < 256) return std::string(1, static_cast<char>(token_id));
  if (token_id == kBos) return "<s>";
  return "<tok" + std::to_string(token_id) + ">";
}

std::string ByteRenderer::chat_text(const OrderedJson& request) {
  std::string text;
  const OrderedJson& messages = request.at("messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const OrderedJson& message = messages[i];
    std::string role = message.at("role").get<std::string>();  // checked by the server
    std::string content;
    const OrderedJson& c = message.value("content", OrderedJson());
    if (c.is_string()) {
      content = c.get<std::string>();
    } else if (c.is_array()) {
      for (const OrderedJson& part : c) {
        if (part.value("type", "") == "text") content += part.value("text", "");
      }
    }
    text += role + ": " + content + "\n";
  }
  if (request.value("add_generation_prompt", true)) text += "assistant: ";
  return text;
}

std::vector<int32_t> ByteRenderer::render_chat(const OrderedJson& request) const {
  return encode(chat_text(request), false);
}

}  // namespace omni::testing
