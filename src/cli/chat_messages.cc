#include "cli/chat_messages.h"

#include <optional>

#include "base/error.h"
#include "model/causal_lm.h"
#include "model/qwen3_omni/thinker_vision.h"
#include "model/whisper_features.h"
#include "server/chat_content.h"
#include "server/chat_media.h"
#include "server/mm_processor_kwargs.h"
#include "text/chat_template/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace omni::cli {
namespace {

namespace fs = std::filesystem;

// A media part whose URL is a plain file path, as a file:// URL.
void plain_paths_to_file_urls(OrderedJson& messages) {
  for (auto& message : messages) {
    if (!message.is_object() || !message.contains("content") || !message["content"].is_array()) continue;
    for (auto& part : message["content"]) {
      if (!part.is_object()) continue;
      const std::string type = part.value("type", "");
      if (type != "audio_url" && type != "image_url" && type != "video_url") continue;
      if (!part.contains(type)) continue;
      OrderedJson& url = part[type].is_object() ? part[type]["url"] : part[type];
      if (url.is_string() && url.get<std::string>().find(':') == std::string::npos) {
        url = "file://" + fs::absolute(url.get<std::string>()).string();
      }
    }
  }
}

}  // namespace

ChatPrompt render_chat_messages(const std::string& text, const std::string& mm_processor_kwargs,
                                const fs::path& model_dir, const fs::path& template_dir,
                                const text::Tokenizer* tokenizer) {
  if (!tokenizer) {
    throw_error(ErrorCode::kInvalidArgument, "--messages needs a tokenizer, and {} has none (give --tokenizer)",
                template_dir.string());
  }
  std::optional<text::ChatTemplate> chat_template = text::ChatTemplate::load(template_dir);
  if (!chat_template) {
    throw_error(ErrorCode::kInvalidArgument,
                "--messages needs a chat template, and {} has none (no chat_template.jinja, no chat_template in "
                "tokenizer_config.json)",
                template_dir.string());
  }
  OrderedJson messages;
  try {
    messages = OrderedJson::parse(text);
  } catch (const OrderedJson::parse_error& e) {
    throw_error(ErrorCode::kInvalidArgument, "--messages: malformed JSON: {}", e.what());
  }
  if (!messages.is_array() || messages.empty()) {
    throw_error(ErrorCode::kInvalidArgument,
                "--messages must be a non-empty JSON list of {{\"role\": ..., \"content\": ...}} objects");
  }
  plain_paths_to_file_urls(messages);
  server::ChatMediaOptions media;
  media.allowed_local_media_path = "/";
  if (fs::exists(model_dir / "preprocessor_config.json") || fs::exists(model_dir / "processor_config.json")) {
    media.audio_sample_rate = model::load_whisper_feature_config(model_dir).sampling_rate;
  }
  // A checkpoint with a vision encoder reads images and video, sampled as its processor says.
  if (fs::exists(model_dir / "config.json") &&
      read_json_file(model_dir / "config.json").value("model_type", "") == "qwen3_omni_moe" &&
      model::qwen3_omni::has_vision_input(model_dir)) {
    const model::qwen3_omni::VisionProcessorConfig vision = model::qwen3_omni::load_vision_processor_config(model_dir);
    media.images = media.videos = true;
    media.video_sampling = {vision.fps, vision.min_frames, vision.max_frames, vision.temporal_patch_size};
  }
  ChatPrompt out;
  try {
    Json kwargs_json;
    if (!mm_processor_kwargs.empty()) {
      try {
        kwargs_json = Json::parse(mm_processor_kwargs);
      } catch (const Json::parse_error& e) {
        throw_error(ErrorCode::kInvalidArgument, "--mm-processor-kwargs: malformed JSON: {}", e.what());
      }
    }
    const server::MmProcessorKwargs kwargs =
        server::parse_mm_processor_kwargs(mm_processor_kwargs.empty() ? nullptr : &kwargs_json, media);
    const OrderedJson prepared =
        server::prepare_message_content(messages, chat_template->content_format(), server::readable_media(media));
    Json decoded = server::collect_chat_media(Json::parse(messages.dump()), server::with_processor_kwargs(media, kwargs));
    if (!decoded.empty()) out.additional_information[model::kMultiModalData] = std::move(decoded);
    if (Json stage = kwargs.stage_kwargs(); !stage.empty())
      out.additional_information[model::kMmProcessorKwargs] = std::move(stage);
    out.token_ids = tokenizer->encode(chat_template->apply(prepared, nullptr, /*add_generation_prompt=*/true));
  } catch (const Error& e) {
    throw Error(e.code(), std::string("--messages: ") + e.what());
  }
  return out;
}

}  // namespace omni::cli
