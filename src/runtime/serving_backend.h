// The contract between the HTTP front end (server/) and whatever serves requests behind it
// (runtime/Orchestrator for a pipeline of stage processes).
//
// Threads: submit() and abort() may be called from any thread (the HTTP I/O threads) and must
// not block on inference. Events for one request are delivered to its EventSink in order, from
// a thread owned by the backend, never concurrently with each other; the sink must not block
// (the server posts them onto the connection's executor). After an event with `finished` set
// no further event arrives for that request.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "runtime/generated_image.h"
#include "runtime/token_logprobs.h"

namespace omni::runtime {

struct GenerationRequest {
  std::string request_id;  // unique per live request; chosen by the server
  // The entry stage's prompt, already rendered (chat template) and tokenized by the server.
  std::vector<int32_t> prompt_token_ids;
  // OpenAI/vLLM sampling fields for the plan's primary stage (the text stage where the route has
  // one, else the output stage: temperature, top_p, max_tokens, stop, seed, logprobs, …),
  // validated by the engine.
  Json sampling_params = Json::object();
  // Optional per-stage sampling parameters (index = stage_id), over the deploy defaults.
  std::vector<Json> sampling_params_list;
  // Requested output modalities ("text", "audio"); empty means the pipeline's default.
  std::vector<std::string> output_modalities;
  // Model-specific request inputs beyond the prompt (vLLM-Omni's additional_information), given
  // to every stage the request runs on: for a speech request the text, voice, language,
  // instructions and task_type of /v1/audio/speech; for a chat request with audio output its
  // "voice". A JSON object; the stages validate what they read.
  Json additional_information = Json::object();
  // The client reads the events as they come. When false the response is written once the request
  // finished, so the backend may hold the events until then (and replay a request whose replica
  // died, since its client has received nothing yet).
  bool stream = true;
};

// One streamed piece of a request's output. A request delivers one output per stage of its plan's
// output_stages (request_plan.h), e.g. a text stage's text and a later stage's audio,
// interleaved as the stages produce them, each output's events in order.
struct ResponseEvent {
  // The output this event belongs to: the final_output_type of the stage that produced it ("text",
  // "audio", "image") and that stage's id. An event that ends the request without output (an
  // error, an abort) has modality "" and stage_id -1.
  std::string modality;
  int stage_id = -1;
  int index = 0;                   // choice index within the output (n > 1)
  std::vector<int32_t> token_ids;  // new tokens since the previous event
  std::string text;                // new text since the previous event (may be empty)
  // One per entry of token_ids when the request asked for logprobs; empty otherwise.
  std::vector<GeneratedTokenLogprobs> logprobs;
  // "stop", "length", "abort" on the choice's last event in this output.
  std::optional<std::string> finish_reason;
  std::optional<Error> error;  // set when the request failed; finished is then true
  // This output's last event: every choice of it has finished. Another output of the request may
  // still be running (finished false): a text output that ends while audio still streams.
  bool output_finished = false;
  // The request's last event: every output has finished (output_finished is then set too), or the
  // request failed or was aborted.
  bool finished = false;
  // Totals so far, for usage: the prompt as the entry stage counted it, and the tokens the plan's
  // primary stage generated (the text stage's where the route has one, whichever output this
  // event belongs to).
  int prompt_tokens = 0;
  int completion_tokens = 0;
  // New audio since the previous event (mono float32 PCM in [-1, 1]) from a stage that outputs
  // audio; audio_sample_rate is set whenever audio is.
  std::vector<float> audio;
  int audio_sample_rate = 0;
  // An image from a stage that outputs images (diffusion), on the request's last event.
  std::optional<GeneratedImage> image;
};

using EventSink = std::function<void(ResponseEvent)>;

// The outcome of putting stages to sleep or waking them up (POST /v1/omni/sleep, /v1/omni/wakeup).
struct StageControlResult {
  std::string status = "SUCCESS";  // or "SKIPPED": nothing to do (no stage was asleep)
  // One entry per stage replica: {stage_id, replica, level, rss_before_bytes, rss_after_bytes, seconds}.
  Json acks = Json::array();
  std::optional<Error> error;  // the first replica's failure (kUnsupported: it cannot sleep so)
};
using StageControlDone = std::function<void(StageControlResult)>;

class ServingBackend {
 public:
  virtual ~ServingBackend() = default;

  // Starts a request. Throws omni::Error (kInvalidArgument for bad sampling parameters or token
  // ids outside the vocabulary, kUnavailable when a stage is down) before anything is queued;
  // after it returns, every outcome arrives through `sink`.
  virtual void submit(GenerationRequest request, EventSink sink) = 0;
  // Stops a request wherever it is (client disconnect, timeout). Unknown ids are ignored. The
  // sink still receives a final event with finish_reason "abort".
  virtual void abort(const std::string& request_id) = 0;
  // False once any stage of the pipeline has failed (GET /health answers 503).
  virtual bool healthy() const = 0;
  // Why healthy() is false, for GET /health's body.
  virtual std::string unhealthy_reason() const { return "a stage of the pipeline has failed"; }

  // Sleep mode. sleep() puts `stage_ids` (empty: every stage) to sleep at `level` (1: KV cache
  // freed, weights kept; 2: weights freed too), ending the requests running there; wake_up()
  // wakes those of `stage_ids` (empty: every stage) that sleep. `done` is called once, from a
  // thread of the backend, when every replica answered. Both throw omni::Error(kInvalidArgument)
  // for a stage id the pipeline lacks, before anything is done. While a stage sleeps, submit()
  // of a request that needs it throws kUnavailable naming the stage. The defaults cannot sleep
  // (kUnsupported through `done`).
  virtual void sleep(std::vector<int> stage_ids, int level, StageControlDone done);
  virtual void wake_up(std::vector<int> stage_ids, StageControlDone done);
  // The stages asleep now, ascending.
  virtual std::vector<int> sleeping_stages() const { return {}; }
};

inline void ServingBackend::sleep(std::vector<int> /*stage_ids*/, int /*level*/, StageControlDone done) {
  StageControlResult result;
  result.error = Error(ErrorCode::kUnsupported, "this server's backend has no sleep mode");
  done(std::move(result));
}

inline void ServingBackend::wake_up(std::vector<int> /*stage_ids*/, StageControlDone done) {
  StageControlResult result;
  result.error = Error(ErrorCode::kUnsupported, "this server's backend has no sleep mode");
  done(std::move(result));
}

}  // namespace omni::runtime
