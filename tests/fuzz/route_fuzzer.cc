// libFuzzer target for one route (OMNI_FUZZ_METHOD OMNI_FUZZ_PATH): the input is the request
// body, answered by the whole ApiServer in-process (CORS, keys, routing, the handler's parsing
// and validation, the formatting of the response) in front of FuzzBackend, with the Qwen3
// tokenizer and chat template, and voice cloning wired in (a speaker embedder whose encoder is a
// stand-in, uploaded voices in a temporary folder), so the voice-upload route and ref_audio reach
// the audio decoder. Inputs of odd length also have their client go away before the backend
// answers (the abort path). The body is JSON, or multipart/form-data with the boundary
// OMNI_FUZZ_MULTIPART_BOUNDARY when that is defined (the voice upload).
//
// What must hold for every body: the exchange ends (one response, or a stream that is ended) within
// 20 s, and its status is never 500: a body the server cannot serve is the client's error (4xx)
// naming it. Work the route hands to the embedder's thread is waited for (a job queued behind it
// marks its end), so one input is one whole exchange.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "base/metrics.h"
#include "fuzz_backend.h"
#include "fuzz_guard.h"
#include "server/api_server.h"
#include "server/speaker_embedder.h"
#include "server/tokenizer_renderer.h"
#include "server/voice_store.h"

#ifdef OMNI_FUZZ_MULTIPART_BOUNDARY
#define OMNI_FUZZ_CONTENT_TYPE "multipart/form-data; boundary=" OMNI_FUZZ_MULTIPART_BOUNDARY
#else
#define OMNI_FUZZ_CONTENT_TYPE "application/json"
#endif

namespace {

constexpr const char* kTarget = "route_fuzzer " OMNI_FUZZ_METHOD " " OMNI_FUZZ_PATH;

// Runs tasks at once on the calling thread (the fuzzer's, or the embedder's for an upload) and
// records how the exchange went; one mutex, since the embedder's thread may answer.
class RecordingResponder : public omni::server::Responder {
 public:
  void respond(omni::server::HttpResponse response) override {
    std::lock_guard lock(mutex_);
    if (ended_) return;
    status_ = response.status;
    body_ = std::move(response.body);
    end_locked();
  }
  void start_stream(int status, std::string, omni::server::HttpHeaders) override {
    std::lock_guard lock(mutex_);
    if (ended_ || streaming_) return;
    status_ = status;
    streaming_ = true;
  }
  void write(std::string data) override {
    std::lock_guard lock(mutex_);
    if (!ended_ && streaming_) body_ += data;
  }
  void end_stream() override {
    std::lock_guard lock(mutex_);
    if (streaming_) end_locked();
  }
  void run(std::function<void()> task) override { task(); }
  void on_disconnect(std::function<void()> callback) override {
    std::unique_lock lock(mutex_);
    if (disconnected_) {
      lock.unlock();
      callback();
    } else {
      on_disconnect_.push_back(std::move(callback));
    }
  }
  void disconnect() {
    std::vector<std::function<void()>> callbacks;
    {
      std::lock_guard lock(mutex_);
      if (ended_ || disconnected_) return;
      disconnected_ = true;
      end_locked();  // the server writes nothing more to a client that is gone
      callbacks.swap(on_disconnect_);
    }
    for (auto& callback : callbacks) callback();
  }

  // Whether the exchange ended within `timeout`.
  bool wait_ended(std::chrono::seconds timeout) {
    std::unique_lock lock(mutex_);
    return ended_changed_.wait_for(lock, timeout, [this] { return ended_; });
  }
  int status() const {
    std::lock_guard lock(mutex_);
    return status_;
  }
  std::string body() const {
    std::lock_guard lock(mutex_);
    return body_;
  }

 private:
  void end_locked() {
    ended_ = true;
    ended_changed_.notify_all();
  }

  mutable std::mutex mutex_;
  std::condition_variable ended_changed_;
  bool ended_ = false;
  bool streaming_ = false;
  bool disconnected_ = false;
  int status_ = 0;
  std::string body_;
  std::vector<std::function<void()>> on_disconnect_;
};

// A stand-in speaker encoder: 16 kHz samples -> 4 numbers (their count, mean, first and last), so
// an upload runs the real decoding, length checks and resampling in front of it.
omni::server::VoiceEncoder fuzz_voice_encoder() {
  omni::server::VoiceEncoder encoder;
  encoder.sample_rate = 16000;
  encoder.embedding_size = 4;
  encoder.embed = [](std::span<const float> samples) {
    const float sum = std::accumulate(samples.begin(), samples.end(), 0.0f);
    return std::vector<float>{static_cast<float>(samples.size()), samples.empty() ? 0.0f : sum / samples.size(),
                              samples.empty() ? 0.0f : samples.front(), samples.empty() ? 0.0f : samples.back()};
  };
  return encoder;
}

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
    voices_dir = std::filesystem::temp_directory_path() / ("omni-fuzz-voices-" + std::to_string(getpid()));
    options.speech.uploaded_voices = std::make_shared<omni::server::VoiceStore>(voices_dir);
    omni::server::ReferenceAudioLimits limits;
    limits.min_seconds = 0.05;  // short references keep the inputs small
    limits.max_seconds = 30.0;
    omni::server::MediaFetchOptions fetch;
    fetch.max_bytes = size_t{1} << 20;
    fetch.timeout = std::chrono::milliseconds(100);
    options.speech.embedder =
        std::make_shared<omni::server::SpeakerEmbedder>(fuzz_voice_encoder(), fetch, limits, 16, metrics);
    speech = options.speech;
    api = std::make_unique<omni::server::ApiServer>(options, backend, renderer.get(), metrics);
  }
  ~Server() {
    api.reset();
    speech = {};
    std::error_code ignored;
    std::filesystem::remove_all(voices_dir, ignored);
  }

  // Returns when every job queued on the embedder so far is done: the embedder runs its jobs one
  // at a time in order, so a job queued now (empty bytes: an error at once) is done after them.
  void wait_for_embedder() {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> finished = done->get_future();
    speech.embedder->submit_bytes("", "barrier", [done](std::vector<float>, std::exception_ptr) { done->set_value(); });
    if (finished.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
      std::fprintf(stderr, "%s: the speaker embedder did not finish its jobs within 20 s\n", kTarget);
      std::abort();
    }
  }
  // Uploaded voices are removed after each input, so every input starts from an empty store.
  void forget_uploaded_voices() {
    for (const omni::server::UploadedVoice& voice : speech.uploaded_voices->list()) {
      speech.uploaded_voices->remove(voice.name);
    }
  }

  omni::MetricsRegistry metrics;
  std::filesystem::path voices_dir;
  omni::server::SpeechOptions speech;
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
  request.headers = {{"content-type", OMNI_FUZZ_CONTENT_TYPE}, {"origin", "https://app.example"}};
  request.body.assign(reinterpret_cast<const char*>(data), size);
  request.received_at = std::chrono::steady_clock::now();
  auto responder = std::make_shared<RecordingResponder>();
  server.api->handle(request, responder);
  if (size % 2 == 1) responder->disconnect();
  server.wait_for_embedder();
  server.backend.deliver();
  omni::fuzz::require(server.backend.pending() == 0, kTarget, "a request was submitted while another was answered");
  if (!responder->wait_ended(std::chrono::seconds(20))) {
    std::fprintf(stderr, "%s: the exchange did not end within 20 s (status %d so far)\n", kTarget, responder->status());
    std::abort();
  }
  server.forget_uploaded_voices();
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
