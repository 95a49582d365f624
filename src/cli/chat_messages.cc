#include "cli/chat_messages.h"

#include <optional>

#include "base/error.h"
#include "cli/chat_media_options.h"
#include "config/pipeline_registry.h"
#include "model/causal_lm.h"
#include "model/pipelines.h"
#include "model/stage_model_registry.h"
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

// What the checkpoint reads, as its family's stage models describe it (the server learns it the
// same way); nothing for a folder no pipeline matches.
model::ModelFacts describe_checkpoint(const fs::path& model_dir) {
  config::PipelineRegistry registry;
  model::register_all_pipelines(registry);
  config::PipelineResolution resolution;
  try {
    resolution = config::resolve_pipeline(registry, model_dir.string(), "");
  } catch (const Error&) {
    return {};
  }
  model::ModelFacts facts;
  const model::StageModels& models = model::builtin_stage_models();
  for (const config::StagePipelineConfig& stage : resolution.pipeline->stages) {
    if (models.has(stage.execution_type, stage.stage_model)) {
      facts.merge(models.describe(stage.execution_type, stage.stage_model, model_dir));
    }
  }
  return facts;
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
  server::ChatMediaOptions media = chat_media_options(describe_checkpoint(model_dir));
  media.allowed_local_media_path = "/";
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
    Json decoded =
        server::collect_chat_media(Json::parse(messages.dump()), server::with_processor_kwargs(media, kwargs));
    if (!decoded.empty()) out.additional_information[model::kMultiModalData] = std::move(decoded);
    if (Json stage = kwargs.stage_kwargs(); !stage.empty())
      out.additional_information[model::kMmProcessorKwargs] = std::move(stage);
    out.token_ids = tokenizer->encode(chat_template->apply(prepared, nullptr, /*add_generation_prompt=*/true));
  } catch (const Error& e) {
    throw Error(e.code(), std::string("--messages: ") + e.what());
  }
  return out;
}

std::unique_ptr<text::Tokenizer> load_model_tokenizer(const fs::path& model_dir) {
  if (fs::exists(model_dir / "tokenizer.json") || fs::exists(model_dir / "vocab.json")) {
    return text::Tokenizer::load(model_dir);
  }
  return nullptr;
}

}  // namespace omni::cli
