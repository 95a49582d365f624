// POST /v1/chat/completions: messages are rendered through the model's chat template and
// tokenized here; the backend gets token ids. vLLM-Omni's extras are honoured: `modalities`
// (the requested output modalities) and `sampling_params_list` (per-stage sampling parameters).
// Streams send, per choice, a first chunk with the assistant role, then content deltas, then a
// chunk with the finish reason; each chunk names its `modality`, as vLLM-Omni's do.
#include <optional>

#include "server/generation.h"
#include "server/openai_error.h"
#include "server/openai_format.h"
#include "server/request_fields.h"
#include "server/routes.h"
#include "server/sampling_params.h"

namespace omni::server {
namespace {

void check_messages(const Json& body) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) throw_invalid_field("messages", "'messages' is required");
  if (!it->is_array() || it->empty()) throw_invalid_field("messages", "'messages' must be a non-empty list");
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& message = (*it)[i];
    std::string prefix = fmt::format("messages[{}]", i);
    if (!message.is_object()) throw_invalid_field(prefix, "'{}' must be an object", prefix);
    FieldReader fields(message, prefix + ".");
    if (!fields.string("role")) throw_invalid_field(prefix + ".role", "'{}.role' is required", prefix);
    auto content = message.find("content");
    if (content != message.end() && !content->is_null() && !content->is_string() && !content->is_array()) {
      throw_invalid_field(prefix + ".content", "'{}.content' must be a string or a list of content parts", prefix);
    }
  }
}

std::vector<std::string> read_modalities(const FieldReader& fields) {
  auto modalities = fields.strings("modalities");
  if (!modalities) return {};
  for (const std::string& modality : *modalities) {
    if (modality != "text" && modality != "audio" && modality != "image") {
      throw_invalid_field("modalities", "'modalities' entries must be text, audio or image, got '{}'", modality);
    }
  }
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

struct ChatCompletion {
  std::shared_ptr<Responder> responder;
  std::shared_ptr<GenerationRun> run;
  std::string id;
  std::string model;
  int64_t created = unix_seconds();
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;
  std::vector<std::string> texts;  // per choice
  std::vector<std::optional<std::string>> finish_reasons;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  std::optional<Error> error;

  Json chunk(Json choices) const {
    Json out = {{"id", id},       {"object", "chat.completion.chunk"}, {"created", created},
                {"model", model}, {"choices", std::move(choices)},     {"modality", "text"}};
    if (include_usage) out["usage"] = continuous_usage ? usage_json(prompt_tokens, completion_tokens) : Json(nullptr);
    return out;
  }

  void start_stream() {
    responder->start_stream(200, kSseContentType, {{"Cache-Control", "no-cache"}});
    for (size_t i = 0; i < texts.size(); ++i) {
      Json delta = {{"role", "assistant"}, {"content", ""}};
      responder->write(sse_event(chunk(Json::array(
          {{{"index", i}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}}}))));
    }
  }

  void on_event(const runtime::ResponseEvent& event) {
    prompt_tokens = event.prompt_tokens;
    completion_tokens = event.completion_tokens;
    if (event.error) {
      if (!error) error = event.error;
      return;
    }
    if (event.index < 0 || static_cast<size_t>(event.index) >= texts.size()) {
      throw_error(ErrorCode::kInternal, "backend reported choice {} of a request with n={}", event.index, texts.size());
    }
    texts[event.index] += event.text;
    if (event.finish_reason) finish_reasons[event.index] = event.finish_reason;
    if (!stream) return;
    if (event.text.empty() && !event.finish_reason) return;
    Json delta = Json::object();
    if (!event.text.empty()) delta["content"] = event.text;
    Json entry = {
        {"index", event.index}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (event.finish_reason) entry["finish_reason"] = *event.finish_reason;
    responder->write(sse_event(chunk(Json::array({std::move(entry)}))));
  }

  void on_finished() {
    if (stream) {
      if (error) responder->write(sse_event(error_json(*error)));
      if (include_usage && !error) {
        Json last = chunk(Json::array());
        last["usage"] = usage_json(prompt_tokens, completion_tokens);
        responder->write(sse_event(last));
      }
      responder->write(kSseDone);
      responder->end_stream();
      return;
    }
    if (error) return responder->respond(error_response(*error));
    Json choices = Json::array();
    for (size_t i = 0; i < texts.size(); ++i) {
      choices.push_back({{"index", i},
                         {"message", {{"role", "assistant"}, {"content", texts[i]}}},
                         {"logprobs", nullptr},
                         {"finish_reason", finish_reasons[i] ? Json(*finish_reasons[i]) : Json(nullptr)}});
    }
    responder->respond(json_response({{"id", id},
                                      {"object", "chat.completion"},
                                      {"created", created},
                                      {"model", model},
                                      {"choices", std::move(choices)},
                                      {"usage", usage_json(prompt_tokens, completion_tokens)}}));
  }
};

void handle_chat_completion(const ServingContext& context, HttpRequest& request, std::shared_ptr<Responder> responder) {
  Json body = parse_request_body(request.body);
  FieldReader fields(body);
  auto chat = std::make_shared<ChatCompletion>();
  chat->responder = responder;
  chat->model = context.resolve_model(body);
  check_messages(body);
  chat->stream = fields.boolean("stream").value_or(false);
  if (const Json* options = fields.object("stream_options")) {
    if (!chat->stream)
      throw_invalid_field("stream_options", "'stream_options' can only be given when 'stream' is true");
    FieldReader option_fields(*options, "stream_options.");
    chat->include_usage = option_fields.boolean("include_usage").value_or(false);
    chat->continuous_usage = option_fields.boolean("continuous_usage_stats").value_or(false);
  }
  runtime::GenerationRequest generation;
  generation.sampling_params = sampling_params_from_request(body, SamplingEndpoint::kChatCompletions);
  generation.output_modalities = read_modalities(fields);
  generation.sampling_params_list = read_sampling_params_list(fields);
  generation.prompt_token_ids =
      context.require_renderer("/v1/chat/completions").render_chat(OrderedJson::parse(request.body));
  if (generation.prompt_token_ids.empty())
    throw_invalid_field("messages", "the chat template rendered an empty prompt");
  if (auto keep = generation.sampling_params.find("truncate_prompt_tokens"); keep != generation.sampling_params.end()) {
    auto& ids = generation.prompt_token_ids;
    size_t limit = keep->get<size_t>();
    if (ids.size() > limit) ids.erase(ids.begin(), ids.end() - limit);
  }
  chat->prompt_tokens = static_cast<int64_t>(generation.prompt_token_ids.size());
  size_t n = generation.sampling_params.value("n", int64_t{1});
  chat->texts.resize(n);
  chat->finish_reasons.resize(n);
  chat->id = random_request_id("chatcmpl-");
  generation.request_id = chat->id;

  std::vector<runtime::GenerationRequest> requests;
  requests.push_back(std::move(generation));
  chat->run = GenerationRun::start(context, responder, std::move(requests),
                                   {[chat](size_t, const runtime::ResponseEvent& event) { chat->on_event(event); },
                                    [chat] {
                                      chat->on_finished();
                                      chat->run.reset();  // breaks the cycle chat -> run -> callbacks -> chat
                                    }});
  if (chat->stream) chat->start_stream();
}

}  // namespace

void add_chat_completion_routes(Router& router, const ServingContext& context) {
  router.add("POST", "/v1/chat/completions", [&context](HttpRequest& request, std::shared_ptr<Responder> responder) {
    handle_chat_completion(context, request, std::move(responder));
  });
}

}  // namespace omni::server
