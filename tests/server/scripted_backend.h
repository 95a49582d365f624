// A ServingBackend for the HTTP tests: a deterministic token stream with configurable delays and
// injected failures, delivered from its own thread as the real orchestrator does. Choice c of a
// request emits the tokens 'a', 'b', 'c'… (byte values, so ByteRenderer decodes them), one event
// per token, until max_tokens (finish_reason "length") or, without max_tokens, default_output_tokens
// (finish_reason "stop"). With sampling parameter logprobs k, the i-th token (1-based) has logprob
// -i/4 and its k alternatives are the token itself and the next letters, each 1 lower.
//
// A request whose output_modalities name "audio" has a second output, as a Qwen3-Omni pipeline's
// code2wav stage gives: `audio_chunks` events of `audio_chunk_samples` samples of audio_samples()
// (modality "audio", stage 2), one per step beside the text's events (modality "text", stage 0;
// none when the modalities leave text out). Each output's last event has output_finished; the
// request's very last one has finished. Without modalities the request has the text output only.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "runtime/serving_backend.h"

namespace omni::testing {

struct ScriptedBackendOptions {
  std::chrono::microseconds first_token_delay{0};
  std::chrono::microseconds token_delay{0};
  int default_output_tokens = 8;
  int audio_chunks = 3;
  int audio_chunk_samples = 480;
};

inline constexpr int kScriptedAudioSampleRate = 24000;

class ScriptedBackend : public runtime::ServingBackend {
 public:
  explicit ScriptedBackend(ScriptedBackendOptions options = {});
  ~ScriptedBackend() override;

  void submit(runtime::GenerationRequest request, runtime::EventSink sink) override;
  void abort(const std::string& request_id) override;
  bool healthy() const override;

  // Failure injection, for the requests submitted afterwards.
  void set_healthy(bool healthy);
  void fail_submits(std::optional<Error> error);                   // submit() throws it
  void fail_after_tokens(int tokens, std::optional<Error> error);  // an error event after `tokens` tokens

  // Observations.
  std::vector<runtime::GenerationRequest> submitted() const;
  std::vector<std::string> aborted() const;
  int live_requests() const;
  int peak_live_requests() const;
  // Waits until no request is live; false on timeout.
  bool wait_idle(std::chrono::milliseconds timeout) const;

  // The first `count` samples of every request's audio: a 440 Hz sine of amplitude 0.5.
  static std::vector<float> audio_samples(int count);

 private:
  struct Live {
    runtime::GenerationRequest request;
    runtime::EventSink sink;
    int max_tokens = 0;
    bool has_max_tokens = false;
    int n = 1;
    std::optional<int> logprobs;  // top logprobs per token, when the request asks for logprobs
    int emitted = 0;              // per choice
    bool text = true;             // the request has a text output
    bool audio = false;           // the request has an audio output
    int audio_emitted = 0;        // audio events so far
    bool aborted = false;
    std::optional<Error> fail;
    int fail_after = 0;
    std::chrono::steady_clock::time_point due;
  };

  void loop();
  // Emits the next step of `live`; true when the request finished.
  bool step(Live& live);

  ScriptedBackendOptions options_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::map<std::string, Live> live_;
  std::vector<runtime::GenerationRequest> submitted_;
  std::vector<std::string> aborted_;
  bool healthy_ = true;
  std::optional<Error> submit_error_;
  std::optional<Error> fail_error_;
  int fail_after_ = 0;
  int peak_ = 0;
  bool stopping_ = false;
  std::optional<std::string> stepping_id_;  // the request whose events are being delivered
  bool stepping_aborted_ = false;
  std::thread worker_;
};

}  // namespace omni::testing
