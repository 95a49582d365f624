#include "server/openai_format.h"
#include "server/routes.h"

namespace omni::server {
void add_info_routes(Router& router, const ServingContext& context, std::function<std::string()> render_metrics,
                     const SpeechOptions& speech) {
  router.add("GET", "/health", [&context](HttpRequest&, std::shared_ptr<Responder> responder) {
    if (context.backend.healthy()) {
      Json body = {{"status", "healthy"}};
      // Sleeping stages are healthy; requests that need them are refused until they wake up.
      if (std::vector<int> sleeping = context.backend.sleeping_stages(); !sleeping.empty()) {
        body["sleeping_stages"] = sleeping;
      }
      responder->respond(json_response(body));
    } else {
      responder->respond(json_response(
          {{"status", "unhealthy"},
           {"error", {{"message", context.backend.unhealthy_reason()}, {"type", "unavailable"}, {"code", 503}}}},
          503));
    }
  });

  // One card per served name, all for the same checkpoint, as vLLM lists them. Each card adds
  // omnistage's description of what is served (our extension, under "omnistage"): the pipeline,
  // the modalities its final stages produce, the speech task of a TTS checkpoint, and every
  // endpoint of the server, so that a client (the playground) can offer what applies.
  router.add("GET", "/v1/models", [&context, &speech, &router](HttpRequest&, std::shared_ptr<Responder> responder) {
    int64_t created = unix_seconds();
    const Json served = {{"pipeline", context.pipeline},
                         {"output_modalities", context.output_modalities},
                         {"speech_task_type", speech.task_type.empty() ? Json(nullptr) : Json(speech.task_type)},
                         {"endpoints", router.endpoints()}};
    Json data = Json::array();
    for (const std::string& name : context.served_model_names) {
      data.push_back({{"id", name},
                      {"object", "model"},
                      {"created", created},
                      {"owned_by", "omnistage"},
                      {"root", context.model_path},
                      {"parent", nullptr},
                      {"max_model_len", context.max_model_len},
                      {"omnistage", served}});
    }
    responder->respond(json_response({{"object", "list"}, {"data", std::move(data)}}));
  });

  router.add("GET", "/version", [&context](HttpRequest&, std::shared_ptr<Responder> responder) {
    responder->respond(json_response({{"version", context.version}}));
  });

  router.add("GET", "/metrics",
             [render = std::move(render_metrics)](HttpRequest&, std::shared_ptr<Responder> responder) {
               HttpResponse response;
               response.content_type = "text/plain; version=0.0.4; charset=utf-8";
               response.body = render();
               responder->respond(std::move(response));
             });
}

}  // namespace omni::server
