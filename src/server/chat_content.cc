#include "server/chat_content.h"

#include <algorithm>
#include <array>
#include <string>
#include <string_view>

#include "server/openai_error.h"

namespace omni::server {
namespace {

// The media part types of the OpenAI API and vLLM (image, audio and video, by URL or inline).
constexpr std::array<std::string_view, 8> kMediaTypes = {"image_url", "input_audio", "audio_url", "video_url",
                                                         "image",     "audio",       "video",     "image_embeds"};

// "image", "audio" or "video": what a media part type carries.
std::string media_kind(const std::string& type) {
  if (type.find("audio") != std::string::npos) return "audio";
  if (type.find("video") != std::string::npos) return "video";
  return "image";
}

}  // namespace

OrderedJson prepare_message_content(const OrderedJson& messages, text::ContentFormat format,
                                    const std::vector<std::string>& readable_media) {
  OrderedJson out = messages;
  for (size_t i = 0; i < out.size(); ++i) {
    OrderedJson& message = out[i];
    if (!message.is_object()) continue;
    auto content = message.find("content");
    if (content == message.end() || !content->is_array()) continue;
    std::string joined;
    OrderedJson parts = OrderedJson::array();
    for (size_t j = 0; j < content->size(); ++j) {
      const OrderedJson& part = (*content)[j];
      const std::string field = fmt::format("messages[{}].content[{}]", i, j);
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
        throw_invalid_field(field,
                            "'{}' must be an object with a string 'type' (text, image_url, input_audio, "
                            "audio_url, video_url)",
                            field);
      }
      const std::string type = part["type"].get<std::string>();
      if (std::find(kMediaTypes.begin(), kMediaTypes.end(), type) != kMediaTypes.end()) {
        const std::string kind = media_kind(type);
        if (std::find(readable_media.begin(), readable_media.end(), kind) != readable_media.end()) {
          if (format == text::ContentFormat::kString) {
            throw_invalid_field(field,
                                "'{}' is a {} part, but the chat template takes string content; media parts need "
                                "a template over content parts (--chat-template-content-format openai)",
                                field, type);
          }
          // The template writes the placeholder of a {"type": "<kind>"} part; the media go to the
          // stage separately (chat_media.h).
          parts.push_back(OrderedJson{{"type", kind}});
          continue;
        }
        throw_invalid_field(field, "'{}' is a {} part, but the served model does not read {} input", field, type,
                            media_kind(type));
      }
      if (type != "text") {
        throw_invalid_field(field + ".type",
                            "'{}.type' '{}' is not a content part type (text, image_url, "
                            "input_audio, audio_url, video_url)",
                            field, type);
      }
      auto text = part.find("text");
      if (text == part.end() || !text->is_string()) {
        throw_invalid_field(field + ".text", "'{}.text' must be a string", field);
      }
      if (j > 0) joined += '\n';
      joined += text->get<std::string>();
      parts.push_back(OrderedJson{{"type", "text"}, {"text", *text}});
    }
    *content = format == text::ContentFormat::kString ? OrderedJson(joined) : parts;
  }
  return out;
}

}  // namespace omni::server
