// POST /v1/completions: OpenAI's legacy completions, with vLLM's extra sampling fields. A
// request may carry several prompts (texts or token-id lists); each becomes one backend request
// and its choices get indexes prompt_index * n + i, as in vLLM.
#include <optional>

#include "server/generation.h"
#include "server/openai_error.h"
#include "server/openai_format.h"
#include "server/request_fields.h"
#include "server/routes.h"
#include "server/sampling_params.h"

namespace omni::server {
namespace {

struct Prompt {
  std::vector<int32_t> token_ids;
  std::optional<std::string> text;  // when the request gave text
};

std::vector<int32_t> token_ids_from(const Json& list, const std::string& field) {
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (const Json& item : list) {
    if (!item.is_number_integer() || item.get<int64_t>() < 0 || item.get<int64_t>() > INT32_MAX) {
      throw_invalid_field(field, "'{}' must hold non-negative token ids, got {}", field, item.dump());
    }
    ids.push_back(item.get<int32_t>());
  }
  return ids;
}

std::vector<Prompt> read_prompts(const Json& body, const ServingContext& context, bool add_special_tokens) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) throw_invalid_field("prompt", "'prompt' is required");
  const Json& prompt = *it;
  constexpr const char* kShapes =
      "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of token ids";
  std::vector<Prompt> prompts;
  auto add_text = [&](const std::string& text) {
    prompts.push_back({context.require_renderer("a text prompt").encode(text, add_special_tokens), text});
  };
  if (prompt.is_string()) {
    add_text(prompt.get<std::string>());
  } else if (prompt.is_array() && !prompt.empty()) {
    const Json& first = prompt.front();
    if (first.is_string()) {
      for (const Json& item : prompt) {
        if (!item.is_string()) throw_invalid_field("prompt", kShapes);
        add_text(item.get<std::string>());
      }
    } else if (first.is_number()) {
      prompts.push_back({token_ids_from(prompt, "prompt"), std::nullopt});
    } else if (first.is_array()) {
      for (size_t i = 0; i < prompt.size(); ++i) {
        if (!prompt[i].is_array()) throw_invalid_field("prompt", kShapes);
        prompts.push_back({token_ids_from(prompt[i], fmt::format("prompt[{}]", i)), std::nullopt});
      }
    } else {
      throw_invalid_field("prompt", kShapes);
    }
  } else {
    throw_invalid_field("prompt", kShapes);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::string field = prompts.size() == 1 ? "prompt" : fmt::format("prompt[{}]", i);
    if (prompts[i].token_ids.empty()) throw_invalid_field(field, "'{}' is empty", field);
    context.check_token_ids(prompts[i].token_ids, field);
  }
  return prompts;
}

// The state of one response, touched only on the connection's executor.
struct Completion {
  std::shared_ptr<Responder> responder;
  std::shared_ptr<GenerationRun> run;
  std::string id;
  std::string model;
  int64_t created = unix_seconds();
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;
  int64_t n = 1;
  std::vector<std::string> echo;   // per prompt: the prompt text to put before the output, when echo
  std::vector<std::string> texts;  // per choice
  std::vector<bool> echoed;        // per choice (streaming)
  std::vector<std::optional<std::string>> finish_reasons;
  std::vector<int64_t> prompt_tokens;      // per prompt, as the backend reports
  std::vector<int64_t> completion_tokens;  // per prompt
  std::optional<Error> error;

  Json usage() const {
    int64_t prompt = 0;
    int64_t completion = 0;
    for (size_t i = 0; i < prompt_tokens.size(); ++i) {
      prompt += prompt_tokens[i];
      completion += completion_tokens[i];
    }
    return usage_json(prompt, completion);
  }

  Json chunk(Json choices) const {
    Json out = {{"id", id},
                {"object", "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", std::move(choices)}};
    if (include_usage) out["usage"] = continuous_usage ? usage() : Json(nullptr);
    return out;
  }

  void on_event(size_t prompt_index, const runtime::ResponseEvent& event) {
    prompt_tokens[prompt_index] = event.prompt_tokens;
    completion_tokens[prompt_index] = event.completion_tokens;
    if (event.error) {
      if (!error) error = event.error;
      run->abort_all();
      return;
    }
    size_t choice = prompt_index * n + event.index;
    if (choice >= texts.size()) {
      throw_error(ErrorCode::kInternal, "backend reported choice {} of a request with n={}", event.index, n);
    }
    std::string text = event.text;
    if (!echo.empty() && !echoed[choice]) {
      echoed[choice] = true;
      text = echo[prompt_index] + text;
    }
    texts[choice] += text;
    if (event.finish_reason) finish_reasons[choice] = event.finish_reason;
    if (!stream || error) return;
    if (text.empty() && !event.finish_reason) return;
    Json entry = {{"index", choice}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (event.finish_reason) entry["finish_reason"] = *event.finish_reason;
    responder->write(sse_event(chunk(Json::array({std::move(entry)}))));
  }

  void on_finished() {
    if (stream) {
      if (error) responder->write(sse_event(error_json(*error)));
      if (include_usage && !error) {
        Json last = chunk(Json::array());
        last["usage"] = usage();
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
                         {"text", texts[i]},
                         {"logprobs", nullptr},
                         {"finish_reason", finish_reasons[i] ? Json(*finish_reasons[i]) : Json(nullptr)}});
    }
    responder->respond(json_response({{"id", id},
                                      {"object", "text_completion"},
                                      {"created", created},
                                      {"model", model},
                                      {"choices", std::move(choices)},
                                      {"usage", usage()}}));
  }
};

void handle_completion(const ServingContext& context, HttpRequest& request, std::shared_ptr<Responder> responder) {
  Json body = parse_request_body(request.body);
  FieldReader fields(body);
  auto completion = std::make_shared<Completion>();
  completion->responder = responder;
  completion->model = context.resolve_model(body);
  completion->stream = fields.boolean("stream").value_or(false);
  if (const Json* options = fields.object("stream_options")) {
    if (!completion->stream) {
      throw_invalid_field("stream_options", "'stream_options' can only be given when 'stream' is true");
    }
    FieldReader option_fields(*options, "stream_options.");
    completion->include_usage = option_fields.boolean("include_usage").value_or(false);
    completion->continuous_usage = option_fields.boolean("continuous_usage_stats").value_or(false);
  }
  if (fields.has("suffix")) throw_invalid_field("suffix", "'suffix' is not supported");
  bool echo = fields.boolean("echo").value_or(false);
  Json sampling = sampling_params_from_request(body, SamplingEndpoint::kCompletions);
  completion->n = sampling.value("n", int64_t{1});

  std::vector<Prompt> prompts = read_prompts(body, context, fields.boolean("add_special_tokens").value_or(true));
  if (auto keep = sampling.find("truncate_prompt_tokens"); keep != sampling.end()) {
    size_t limit = keep->get<size_t>();
    for (Prompt& prompt : prompts) {
      if (prompt.token_ids.size() > limit)
        prompt.token_ids.erase(prompt.token_ids.begin(), prompt.token_ids.end() - limit);
    }
  }
  if (echo) {
    for (const Prompt& prompt : prompts) {
      completion->echo.push_back(
          prompt.text ? *prompt.text : context.require_renderer("'echo' of token ids").decode(prompt.token_ids, false));
    }
  }

  std::string base_id = random_request_id("cmpl-");
  completion->id = base_id;
  size_t choices = prompts.size() * completion->n;
  completion->texts.resize(choices);
  completion->echoed.resize(choices, false);
  completion->finish_reasons.resize(choices);
  completion->prompt_tokens.resize(prompts.size(), 0);
  completion->completion_tokens.resize(prompts.size(), 0);

  std::vector<runtime::GenerationRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    runtime::GenerationRequest generation;
    generation.request_id = prompts.size() == 1 ? base_id : fmt::format("{}-{}", base_id, i);
    generation.prompt_token_ids = std::move(prompts[i].token_ids);
    completion->prompt_tokens[i] = static_cast<int64_t>(generation.prompt_token_ids.size());
    generation.sampling_params = sampling;
    requests.push_back(std::move(generation));
  }

  completion->run = GenerationRun::start(
      context, responder, std::move(requests),
      {[completion](size_t index, const runtime::ResponseEvent& event) { completion->on_event(index, event); },
       [completion] {
         completion->on_finished();
         completion->run.reset();  // breaks the cycle completion -> run -> callbacks -> completion
       }});
  if (completion->stream) responder->start_stream(200, kSseContentType, {{"Cache-Control", "no-cache"}});
}

}  // namespace

void add_completion_routes(Router& router, const ServingContext& context) {
  router.add("POST", "/v1/completions", [&context](HttpRequest& request, std::shared_ptr<Responder> responder) {
    handle_completion(context, request, std::move(responder));
  });
}

}  // namespace omni::server
