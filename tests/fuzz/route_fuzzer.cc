// libFuzzer target for one route (OMNI_FUZZ_METHOD OMNI_FUZZ_PATH): the input is the request
// body, answered by the whole ApiServer in-process (CORS, keys, routing, the handler's parsing
// and validation, the formatting of the response) in front of FuzzBackend, with the Qwen3
// tokenizer and chat template. Inputs of odd length also have their client go away before the
// backend answers (the abort path).
//
// What must hold for every body: the exchange ends (one response, or a stream that is ended), and
// its status is never 500: a body the server cannot serve is the client's error (4xx) naming it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/metrics.h"
#include "fuzz_backend.h"
#include "fuzz_guard.h"
#include "server/api_server.h"
#include "server/tokenizer_renderer.h"

namespace {

constexpr const char* kTarget = "route_fuzzer " OMNI_FUZZ_METHOD " " OMNI_FUZZ_PATH;

// Runs everything at once on the calling thread and records how the exchange went.
class RecordingResponder : public omni::server::Responder {
 public:
  void respond(omni::server::HttpResponse response) override {
    if (ended_) return;
    status_ = response.status;
    body_ = std::move(response.body);
    ended_ = true;
  }
  void start_stream(int status, std::string, omni::server::HttpHeaders) override {
    if (ended_ || streaming_) return;
    status_ = status;
    streaming_ = true;
  }
  void write(std::string data) override {
    if (!ended_ && streaming_) body_ += data;
  }
  void end_stream() override {
    if (streaming_) ended_ = true;
  }
  void run(std::function<void()> task) override { task(); }
  void on_disconnect(std::function<void()> callback) override {
    if (disconnected_) {
      callback();
    } else {
      on_disconnect_.push_back(std::move(callback));
    }
  }
  void disconnect() {
    if (ended_ || disconnected_) return;
    disconnected_ = true;
    ended_ = true;  // the server writes nothing more to a client that is gone
    for (auto& callback : on_disconnect_) callback();
  }

  bool ended() const { return ended_; }
  int status() const { return status_; }
  const std::string& body() const { return body_; }

 private:
  bool ended_ = false;
  bool streaming_ = false;
  bool disconnected_ = false;
  int status_ = 0;
  std::string body_;
  std::vector<std::function<void()>> on_disconnect_;
};

struct Server {
  Server() {
    renderer = omni::server::TokenizerRenderer::load(OMNI_QWEN3_TOKENIZER_DIR);
    omni::server::ApiServerOptions options;
    options.model_path = "fuzz-model";
    options.max_model_len = 4096;
    options.io_threads = 1;
    options.max_inflight_requests = 64;
    options.output_modalities = {"text", "audio"};
    options.speech.voices = {"Vivian", "Ryan"};
    options.speech.task_type = "CustomVoice";
    api = std::make_unique<omni::server::ApiServer>(options, backend, renderer.get(), metrics);
  }
  omni::MetricsRegistry metrics;
  omni::fuzz::FuzzBackend backend;
  std::unique_ptr<omni::server::TokenizerRenderer> renderer;
  std::unique_ptr<omni::server::ApiServer> api;
};

Server& server() {
  static Server instance;
  return instance;
}

void run(const uint8_t* data, size_t size) {
  Server& server = ::server();
  omni::server::HttpRequest request;
  request.method = OMNI_FUZZ_METHOD;
  request.path = OMNI_FUZZ_PATH;
  request.headers = {{"content-type", "application/json"}, {"origin", "https://app.example"}};
  request.body.assign(reinterpret_cast<const char*>(data), size);
  request.received_at = std::chrono::steady_clock::now();
  auto responder = std::make_shared<RecordingResponder>();
  server.api->handle(request, responder);
  if (size % 2 == 1) responder->disconnect();
  server.backend.deliver();
  omni::fuzz::require(server.backend.pending() == 0, kTarget, "a request was submitted while another was answered");
  if (!responder->ended()) {
    std::fprintf(stderr, "%s: the exchange did not end (status %d so far)\n", kTarget, responder->status());
    std::abort();
  }
  if (responder->status() >= 500) {
    std::fprintf(stderr, "%s: status %d for a client's body: %s\n", kTarget, responder->status(),
                 responder->body().c_str());
    std::abort();
  }
}

}  // namespace

// The set-up (loading the tokenizer, starting a server) before the first input, outside its timeout.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)server();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  omni::fuzz::expect_only_omni_errors(kTarget, [&] { run(data, size); });
  return 0;
}
