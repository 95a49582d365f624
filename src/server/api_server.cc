#include "server/api_server.h"

#include "server/http_server.h"
#include "server/openai_error.h"
#include "server/process_local_state.h"
#include "server/routes.h"
#include "server/serving_context.h"

namespace omni::server {
namespace {

// Compares without an early exit so the time taken does not reveal how much of a key matched.
bool same_key(std::string_view given, std::string_view expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ expected[i % (expected.empty() ? 1 : expected.size())]);
  }
  return diff == 0 && !expected.empty();
}

// With several API frontends, every response names the frontend that answered it
// (x-omnistage-frontend: its index), so that a client can see how its requests were spread.
class FrontendResponder final : public Responder {
 public:
  FrontendResponder(std::shared_ptr<Responder> inner, std::string index)
      : inner_(std::move(inner)), index_(std::move(index)) {}

  void respond(HttpResponse response) override {
    response.headers.emplace_back("x-omnistage-frontend", index_);
    inner_->respond(std::move(response));
  }
  void start_stream(int status, std::string content_type, HttpHeaders headers) override {
    headers.emplace_back("x-omnistage-frontend", index_);
    inner_->start_stream(status, std::move(content_type), std::move(headers));
  }
  void write(std::string data) override { inner_->write(std::move(data)); }
  void end_stream() override { inner_->end_stream(); }
  void run(std::function<void()> task) override { inner_->run(std::move(task)); }
  void on_disconnect(std::function<void()> callback) override { inner_->on_disconnect(std::move(callback)); }

 private:
  std::shared_ptr<Responder> inner_;
  std::string index_;
};

}  // namespace

struct ApiServer::Impl {
  Impl(ApiServerOptions opts, runtime::ServingBackend& backend, const PromptRenderer* renderer,
       MetricsRegistry& registry)
      : options(std::move(opts)),
        served_names(options.served_model_names.empty() ? std::vector<std::string>{options.model_path}
                                                        : options.served_model_names),
        metrics(registry, served_names.empty() ? "" : served_names.front()),
        context{backend,         renderer, served_names,     options.model_path,        options.max_model_len,
                options.version, metrics,  options.pipeline, options.output_modalities, options.unserved_modalities},
        http(
            HttpServerOptions{options.host, options.port, options.io_threads, options.max_body_bytes,
                              std::chrono::seconds(60), options.drain_timeout, options.reuse_port},
            [this](HttpRequest& request, std::shared_ptr<Responder> responder) {
              if (options.api_server_count != 1) {
                responder =
                    std::make_shared<FrontendResponder>(std::move(responder), std::to_string(options.frontend_index));
              }
              handle(request, responder);
            },
            transport_error_response) {
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
    add_omni_control_routes(router, context, options.enable_sleep_mode);
    if (options.playground) add_playground_routes(router);
  }

  void handle(HttpRequest& request, const std::shared_ptr<Responder>& responder) {
    if (options.api_key && request.path.starts_with("/v1")) {
      std::string_view authorization = request.header("authorization");
      constexpr std::string_view kBearer = "Bearer ";
      bool ok = authorization.starts_with(kBearer) && same_key(authorization.substr(kBearer.size()), *options.api_key);
      if (!ok) {
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

  ApiServerOptions options;
  Counter* frontend_requests = nullptr;
  std::vector<std::string> served_names;
  RequestMetrics metrics;
  ServingContext context;
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

}  // namespace omni::server
