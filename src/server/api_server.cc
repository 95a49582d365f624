#include "server/api_server.h"

#include "server/api_keys.h"
#include "server/http_server.h"
#include "server/openai_error.h"
#include "server/process_local_state.h"
#include "server/routes.h"
#include "server/serving_context.h"

namespace omni::server {

struct ApiServer::Impl {
  Impl(ApiServerOptions opts, runtime::ServingBackend& backend, const PromptRenderer* renderer,
       MetricsRegistry& registry)
      : options(std::move(opts)),
        served_names(options.served_model_names.empty() ? std::vector<std::string>{options.model_path}
                                                        : options.served_model_names),
        metrics(registry, served_names.empty() ? "" : served_names.front()),
        inflight(options.max_inflight_requests),
        context{backend,
                renderer,
                served_names,
                options.model_path,
                options.max_model_len,
                options.version,
                metrics,
                options.pipeline,
                options.output_modalities,
                options.unserved_modalities,
                &inflight,
                &options.media,
                options.speech.voices},
        api_keys(options.api_keys),
        cors(options.cors),
        http(
            HttpServerOptions{options.host, options.port, options.io_threads, options.http_limits,
                              options.drain_timeout, options.reuse_port},
            [this](HttpRequest& request, std::shared_ptr<Responder> responder) {
              // With several API frontends, every response names the frontend that answered it, so
              // that a client can see how its requests were spread.
              if (options.api_server_count != 1) {
                responder = with_headers(std::move(responder),
                                         {{"x-omnistage-frontend", std::to_string(options.frontend_index)}});
              }
              handle(request, std::move(responder));
            },
            transport_error_response,
            [this](HttpRequest& request, std::shared_ptr<WebSocket> socket) { return upgrade(request, socket); }) {
    frontend_requests = &registry
                             .counter("omnistage:api_server_requests_total",
                                      "HTTP requests this API frontend took (label frontend: its index among the "
                                      "--api-server-count frontends).",
                                      {"frontend"})
                             .with({std::to_string(options.frontend_index)});
    add_info_routes(router, context,
                    options.render_metrics ? options.render_metrics : std::function<std::string()>([&registry] {
                      return registry.render_prometheus();
                    }),
                    options.speech);
    add_completion_routes(router, context);
    add_chat_completion_routes(router, context);
    add_tokenize_routes(router, context);
    add_speech_routes(router, context, options.speech);
    add_image_routes(router, context);
    add_omni_control_routes(router, context, options.enable_sleep_mode);
    if (options.playground) add_playground_routes(router);
  }

  void handle(HttpRequest& request, std::shared_ptr<Responder> responder) {
    if (std::optional<HttpResponse> preflight = cors.preflight(request)) {
      responder->respond(std::move(*preflight));
      return;
    }
    responder = with_headers(std::move(responder), cors.response_headers(request));
    if (api_keys.guards(request.method, request.path, router.has_path(request.path))) {
      std::string_view authorization = request.header("authorization");
      if (!api_keys.accepts(authorization)) {
        HttpResponse response = error_response(
            401, error_code_name(ErrorCode::kUnauthorized),
            authorization.empty() ? "missing API key: send 'Authorization: Bearer <key>'" : "invalid API key");
        response.headers.emplace_back("WWW-Authenticate", "Bearer");
        responder->respond(std::move(response));
        return;
      }
    }
    if (request.path.starts_with("/v1/")) frontend_requests->add();
    if (auto refusal = process_local_refusal(request.method, request.path, options.api_server_count)) {
      responder->respond(std::move(*refusal));
      return;
    }
    router.dispatch(request, responder);
  }

  // A WebSocket upgrade passes the same API-key check as any request.
  std::variant<WebSocketCallbacks, HttpResponse> upgrade(HttpRequest& request, std::shared_ptr<WebSocket> socket) {
    if (api_keys.guards(request.method, request.path, router.has_path(request.path)) &&
        !api_keys.accepts(request.header("authorization"))) {
      HttpResponse response =
          error_response(401, error_code_name(ErrorCode::kUnauthorized), "invalid or missing API key");
      response.headers.emplace_back("WWW-Authenticate", "Bearer");
      return response;
    }
    if (request.path.starts_with("/v1/")) frontend_requests->add();
    return router.upgrade(request, std::move(socket));
  }

  ApiServerOptions options;
  Counter* frontend_requests = nullptr;
  std::vector<std::string> served_names;
  RequestMetrics metrics;
  InflightLimit inflight;
  ServingContext context;
  ApiKeys api_keys;
  CorsPolicy cors;
  Router router;
  HttpServer http;
};

ApiServer::ApiServer(ApiServerOptions options, runtime::ServingBackend& backend, const PromptRenderer* renderer,
                     MetricsRegistry& metrics) {
  if (options.served_model_names.empty() && options.model_path.empty()) {
    throw_error(ErrorCode::kInvalidArgument, "the API server needs a model path or --served-model-name");
  }
  for (const auto& name : options.served_model_names) {
    if (name.empty()) throw_error(ErrorCode::kInvalidArgument, "--served-model-name: a name cannot be empty");
  }
  impl_ = std::make_unique<Impl>(std::move(options), backend, renderer, metrics);
}

ApiServer::~ApiServer() { stop(); }

void ApiServer::start() { impl_->http.start(); }
uint16_t ApiServer::port() const { return impl_->http.port(); }
void ApiServer::stop() { impl_->http.stop(); }
void ApiServer::handle(HttpRequest& request, std::shared_ptr<Responder> responder) {
  impl_->handle(request, std::move(responder));
}

}  // namespace omni::server
