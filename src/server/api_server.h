// The OpenAI-compatible API server: the HTTP transport, the routing table with every route
// family, API-key checks (api_keys.h), CORS (cors.h), the bound on requests in flight
// (inflight_limit.h), and the request metrics, in front of one ServingBackend.
//
// Ownership: the backend, the renderer and the metrics registry are the caller's and must
// outlive the ApiServer. Threads: construct, start() and stop() from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/metrics.h"
#include "runtime/serving_backend.h"
#include "server/chat_media.h"
#include "server/cors.h"
#include "server/http_server.h"
#include "server/prompt_renderer.h"
#include "server/speech_request.h"

namespace omni::server {

struct ApiServerOptions {
  std::string host = "127.0.0.1";  // --host
  uint16_t port = 8000;            // --port; 0 picks a free port
  // --api-key (or OMNISTAGE_API_KEY / VLLM_API_KEY): when any is set, requests need
  // `Authorization: Bearer <key>` with one of them (which paths: api_keys.h).
  std::vector<std::string> api_keys;
  CorsOptions cors;  // --allowed-origins, --allowed-methods, --allowed-headers, --allow-credentials
  // --served-model-name; empty means the model path, as in vLLM.
  std::vector<std::string> served_model_names;
  std::string model_path;
  int max_model_len = 0;
  std::string version;  // what GET /version reports
  // The served pipeline's name and the modalities its final-output stages produce (their
  // final_output_type): a chat request whose `modalities` asks for another one is refused.
  std::string pipeline;
  std::vector<std::string> output_modalities = {"text"};
  // Modalities of final-output stages the pipeline has but that are not served (their stage
  // models are not built yet): a request for one is refused saying so.
  std::vector<std::string> unserved_modalities;
  int io_threads = 4;
  HttpLimits http_limits;
  // Backend requests in flight at most (--max-inflight-requests); past it 503 with Retry-After. 0: no bound.
  size_t max_inflight_requests = 4096;
  std::chrono::milliseconds drain_timeout{std::chrono::seconds(5)};
  SpeechOptions speech;  // the voices and limits of /v1/audio/speech
  // Chat media parts: the model's audio input rate (from its stage models' description),
  // --limit-mm-per-prompt, --allowed-local-media-path (server/chat_media.h).
  ChatMediaOptions media;
  // --enable-sleep-mode: POST /v1/omni/sleep and /v1/omni/wakeup work (else they answer 400).
  bool enable_sleep_mode = false;
  // Multiple API frontends (--api-server-count): how many there are (0: not known, which refuses
  // the process-local operations with 503, server/process_local_state.h) and which one this is.
  // Each frontend listens on the same address with SO_REUSEPORT (reuse_port) and counts the
  // requests it took in omnistage:api_server_requests_total{frontend}.
  int api_server_count = 1;
  int frontend_index = 0;
  bool reuse_port = false;
  // What GET /metrics answers; null: this server's registry (a frontend among several merges
  // the others' series in, server/frontend_metrics.h).
  std::function<std::string()> render_metrics;
  // GET / and /playground serve the playground page; --disable-playground turns it off.
  bool playground = true;
};

class ApiServer {
 public:
  // Throws Error(kInvalidArgument) when there is no model name to serve under.
  ApiServer(ApiServerOptions options, runtime::ServingBackend& backend, const PromptRenderer* renderer,
            MetricsRegistry& metrics);
  ~ApiServer();

  // Listens; throws Error(kUnavailable) naming host:port when it cannot.
  void start();
  uint16_t port() const;
  // Graceful stop (see HttpServer::stop): in-flight streams finish or are aborted.
  void stop();
  // Answers one request in-process, exactly as if it had arrived on a connection (CORS, API keys,
  // routing, the handler); the fuzz targets (tests/fuzz) drive the route parsers through it.
  void handle(HttpRequest& request, std::shared_ptr<Responder> responder);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace omni::server
