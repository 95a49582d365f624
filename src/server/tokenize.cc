// POST /tokenize and /detokenize in vLLM's shapes. /tokenize takes either a `prompt` (text) or
// chat `messages` (rendered through the chat template, like /v1/chat/completions would).
#include "base/json_long_strings.h"
#include "server/openai_error.h"
#include "server/openai_format.h"
#include "server/request_fields.h"
#include "server/routes.h"

namespace omni::server {
namespace {

void handle_tokenize(const ServingContext& context, HttpRequest& request, Responder& responder) {
  Json body = parse_request_body(request.body);
  FieldReader fields(body);
  context.resolve_model(body);
  const PromptRenderer& renderer = context.require_renderer("/tokenize");
  std::vector<int32_t> tokens;
  if (fields.has("messages")) {
    if (!fields.array("messages")) throw_invalid_field("messages", "'messages' must be a list");
    tokens = renderer.render_chat(parse_ordered_json_with_long_strings(request.body));
  } else if (auto prompt = fields.string("prompt")) {
    tokens = renderer.encode(*prompt, fields.boolean("add_special_tokens").value_or(true));
  } else {
    throw_invalid_field("prompt", "/tokenize needs 'prompt' (text) or 'messages' (a chat)");
  }
  Json response = {
      {"count", tokens.size()}, {"max_model_len", context.max_model_len}, {"tokens", tokens}, {"token_strs", nullptr}};
  if (fields.boolean("return_token_strs").value_or(false)) {
    Json strs = Json::array();
    for (int32_t token : tokens) strs.push_back(renderer.token_text(token));
    response["token_strs"] = std::move(strs);
  }
  responder.respond(json_response(response));
}

void handle_detokenize(const ServingContext& context, HttpRequest& request, Responder& responder) {
  Json body = parse_request_body(request.body);
  FieldReader fields(body);
  context.resolve_model(body);
  const PromptRenderer& renderer = context.require_renderer("/detokenize");
  auto tokens = fields.integers("tokens");
  if (!tokens) throw_invalid_field("tokens", "'tokens' is required");
  std::vector<int32_t> ids;
  for (int64_t token : *tokens) {
    if (token < 0 || token >= renderer.vocab_size()) {
      throw_invalid_field("tokens", "token id {} is outside the vocabulary [0, {})", token, renderer.vocab_size());
    }
    ids.push_back(static_cast<int32_t>(token));
  }
  responder.respond(json_response({{"prompt", renderer.decode(ids, false)}}));
}

}  // namespace

void add_tokenize_routes(Router& router, const ServingContext& context) {
  router.add("POST", "/tokenize", [&context](HttpRequest& request, std::shared_ptr<Responder> responder) {
    handle_tokenize(context, request, *responder);
  });
  router.add("POST", "/detokenize", [&context](HttpRequest& request, std::shared_ptr<Responder> responder) {
    handle_detokenize(context, request, *responder);
  });
}

}  // namespace omni::server
