// POST /v1/chat/completions: messages are rendered through the model's chat template and
// tokenized here; the backend gets token ids. vLLM-Omni's extras are honoured: `modalities`
// (the requested output modalities; absent: every output of the pipeline's default route, for
// Qwen3-Omni text and audio) and `sampling_params_list` (per-stage sampling parameters). OpenAI's
// `audio` object sets the audio output's format and voice (chat_audio.h); the voice goes to the
// stages as additional_information["voice"].
// Streams send, per choice, a first chunk with the assistant role (when the request delivers
// text), then content deltas, then a chunk with the finish reason; each chunk names its
// `modality`, as vLLM-Omni's do (completion_response.h).
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string_view>

#include "base/json_long_strings.h"
#include "server/chat_audio.h"
#include "server/chat_media.h"
#include "server/completion_response.h"
#include "server/mm_processor_kwargs.h"
#include "server/openai_error.h"
#include "server/request_fields.h"
#include "server/routes.h"
#include "server/sampling_params.h"

namespace omni::server {
namespace {

// The message roles of OpenAI's chat API (and vLLM's): a template given another one would render
// it as it pleases, or not at all.
constexpr std::array<std::string_view, 6> kRoles = {"system", "user", "assistant", "tool", "developer", "function"};

void check_messages(const Json& body) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) throw_invalid_field("messages", "'messages' is required");
  if (!it->is_array() || it->empty()) throw_invalid_field("messages", "'messages' must be a non-empty list");
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& message = (*it)[i];
    std::string prefix = fmt::format("messages[{}]", i);
    if (!message.is_object()) throw_invalid_field(prefix, "'{}' must be an object", prefix);
    FieldReader fields(message, prefix + ".");
    std::optional<std::string> role = fields.string("role");
    if (!role) throw_invalid_field(prefix + ".role", "'{}.role' is required", prefix);
    if (std::find(kRoles.begin(), kRoles.end(), *role) == kRoles.end()) {
      throw_invalid_field(prefix + ".role", "'{}.role' must be one of {}, got {}", prefix, fmt::join(kRoles, ", "),
                          brief(*role));
    }
    auto content = message.find("content");
    if (content != message.end() && !content->is_null() && !content->is_string() && !content->is_array()) {
      throw_invalid_field(prefix + ".content", "'{}.content' must be a string or a list of content parts", prefix);
    }
  }
}

// The requested output modalities, each one the served pipeline produces: asking for audio from a
// pipeline without an audio stage is refused rather than answered with text alone.
std::vector<std::string> read_modalities(const FieldReader& fields, const ServingContext& context) {
  auto modalities = fields.strings("modalities");
  if (!modalities) return {};
  for (const std::string& modality : *modalities) {
    if (modality != "text" && modality != "audio" && modality != "image") {
      throw_invalid_field("modalities", "'modalities' entries must be text, audio or image, got '{}'", modality);
    }
  }
  context.check_output_modalities(*modalities);
  return *modalities;
}

std::vector<Json> read_sampling_params_list(const FieldReader& fields) {
  std::vector<Json> list;
  if (const Json* entries = fields.array("sampling_params_list")) {
    for (size_t i = 0; i < entries->size(); ++i) {
      const Json& entry = (*entries)[i];
      if (!entry.is_object() && !entry.is_null()) {
        throw_invalid_field(fmt::format("sampling_params_list[{}]", i),
                            "'sampling_params_list[{}]' must be an object (the sampling parameters of stage {})", i, i);
      }
      list.push_back(entry.is_null() ? Json::object() : entry);
    }
  }
  return list;
}

void handle_chat_completion(const ServingContext& context, HttpRequest& request, std::shared_ptr<Responder> responder) {
  Json body = parse_request_body(request.body);
  FieldReader fields(body);
  std::string model = context.resolve_model(body);
  check_messages(body);
  runtime::GenerationRequest generation;
  generation.sampling_params = sampling_params_from_request(body, SamplingEndpoint::kChatCompletions);
  CompletionResponseSpec spec =
      response_spec_from_request(CompletionApi::kChat, std::move(model), fields, generation.sampling_params);
  generation.output_modalities = read_modalities(fields, context);
  const std::vector<std::string>& delivered =
      generation.output_modalities.empty() ? context.output_modalities : generation.output_modalities;
  spec.text_output = std::find(delivered.begin(), delivered.end(), "text") != delivered.end();
  const ChatAudioOptions audio = read_chat_audio(fields, context.voices);
  spec.audio_format = audio.format;
  if (audio.voice) generation.additional_information["voice"] = *audio.voice;
  generation.sampling_params_list = read_sampling_params_list(fields);
  generation.prompt_token_ids =
      context.require_renderer("/v1/chat/completions").render_chat(parse_ordered_json_with_long_strings(request.body));
  if (generation.prompt_token_ids.empty())
    throw_invalid_field("messages", "the chat template rendered an empty prompt");
  const auto kwargs_field = body.find("mm_processor_kwargs");
  const Json* kwargs_value = kwargs_field == body.end() ? nullptr : &*kwargs_field;
  if (context.media != nullptr) {
    // The media the template wrote placeholders for, decoded in the same order (chat_media.h), with
    // the request's processor kwargs (mm_processor_kwargs.h).
    const MmProcessorKwargs kwargs = parse_mm_processor_kwargs(kwargs_value, *context.media);
    Json media = collect_chat_media(body.at("messages"), with_processor_kwargs(*context.media, kwargs));
    if (!media.empty()) generation.additional_information["multi_modal_data"] = std::move(media);
    if (Json stage = kwargs.stage_kwargs(); !stage.empty())
      generation.additional_information["mm_processor_kwargs"] = std::move(stage);
  } else if (kwargs_value != nullptr && !kwargs_value->is_null()) {
    parse_mm_processor_kwargs(kwargs_value, ChatMediaOptions{});  // refuses any key: no media
  }
  apply_truncate_prompt_tokens(body, generation.prompt_token_ids);
  context.check_context_length(generation.prompt_token_ids.size(), max_tokens_of(generation.sampling_params),
                               "messages");
  spec.id = random_request_id("chatcmpl-");
  generation.request_id = spec.id;

  std::vector<runtime::GenerationRequest> requests;
  requests.push_back(std::move(generation));
  start_completion_response(context, request, std::move(responder), std::move(requests), std::move(spec));
}

}  // namespace

void add_chat_completion_routes(Router& router, const ServingContext& context) {
  router.add("POST", "/v1/chat/completions", [&context](HttpRequest& request, std::shared_ptr<Responder> responder) {
    handle_chat_completion(context, request, std::move(responder));
  });
}

}  // namespace omni::server
