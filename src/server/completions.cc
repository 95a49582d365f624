// POST /v1/completions: OpenAI's legacy completions, with vLLM's extra sampling fields. A
// request may carry several prompts (texts or token-id lists); each becomes one backend request
// and its choices get indexes prompt_index * n + i, as in vLLM.
#include <algorithm>
#include <optional>

#include "server/completion_response.h"
#include "server/openai_error.h"
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
      throw_invalid_field(field, "'{}' must hold non-negative token ids, got {}", field, brief(item));
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

void handle_completion(const ServingContext& context, HttpRequest& request, std::shared_ptr<Responder> responder) {
  Json body = parse_request_body(request.body);
  FieldReader fields(body);
  std::string model = context.resolve_model(body);
  if (fields.has("suffix")) throw_invalid_field("suffix", "'suffix' is not supported");
  bool echo = fields.boolean("echo").value_or(false);
  Json sampling = sampling_params_from_request(body, SamplingEndpoint::kCompletions);
  CompletionResponseSpec spec = response_spec_from_request(CompletionApi::kText, std::move(model), fields, sampling);

  std::vector<Prompt> prompts = read_prompts(body, context, fields.boolean("add_special_tokens").value_or(true));
  for (size_t i = 0; i < prompts.size(); ++i) {
    apply_truncate_prompt_tokens(body, prompts[i].token_ids);
    context.check_context_length(prompts[i].token_ids.size(), max_tokens_of(sampling),
                                 prompts.size() == 1 ? "prompt" : fmt::format("prompt[{}]", i));
  }
  if (echo) {
    for (const Prompt& prompt : prompts) {
      spec.echo.push_back(
          prompt.text ? *prompt.text : context.require_renderer("'echo' of token ids").decode(prompt.token_ids, false));
    }
  }

  spec.id = random_request_id("cmpl-");
  // Text completions read text: a pipeline that also speaks (Qwen3-Omni) runs its text stage only.
  const bool has_text = std::find(context.output_modalities.begin(), context.output_modalities.end(), "text") !=
                        context.output_modalities.end();
  std::vector<runtime::GenerationRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    runtime::GenerationRequest generation;
    generation.request_id = prompts.size() == 1 ? spec.id : fmt::format("{}-{}", spec.id, i);
    generation.prompt_token_ids = std::move(prompts[i].token_ids);
    generation.sampling_params = sampling;
    if (has_text) generation.output_modalities = {"text"};
    requests.push_back(std::move(generation));
  }
  start_completion_response(context, request, std::move(responder), std::move(requests), std::move(spec));
}

}  // namespace

void add_completion_routes(Router& router, const ServingContext& context) {
  router.add("POST", "/v1/completions", [&context](HttpRequest& request, std::shared_ptr<Responder> responder) {
    handle_completion(context, request, std::move(responder));
  });
}

}  // namespace omni::server
