// What a stage worker runs: one StageRunner owns the stage's engine and its requests. The worker
// loop (stage_worker.h) is its only caller, from one thread; a runner never sees sockets or
// processes. The production runners adapt one engine each ("ar": engine::ArEngine,
// "generation": engine::GenerationEngine) to this protocol; runner kinds are registered by name and
// chosen by the stage's engine_args["runner"] (pipeline_from_config.h sets it from the stage's
// execution type). Tests register their stand-in runners with register_stage_runner().
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
#include "runtime/payload.h"
#include "runtime/stage_spec.h"
#include "runtime/step_timing.h"
#include "runtime/token_logprobs.h"
#include "tensor/device.h"

namespace omni::runtime {

struct StageRequest {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  Json sampling_params = Json::object();
  std::vector<PayloadView> inputs;  // upstream payloads, read in place; held as long as needed
  // async_chunk: the input goes on in add_input() calls until one marked `last`.
  bool input_open = false;
  // GenerationRequest::additional_information of the request (a JSON object).
  Json additional_information = Json::object();
  // A later stage on the request's route reads this stage's payloads for it.
  bool feeds_downstream = false;
};

// The next piece of a streamed (async_chunk) request input.
struct StageInputChunk {
  std::vector<int32_t> token_ids;
  std::vector<PayloadView> payloads;
  bool last = false;
};

struct StageOutput {
  std::string request_id;
  std::vector<int32_t> token_ids;  // new since the previous output of this choice
  std::string text;
  // Set once per choice, on its last output. The request has finished with it unless
  // `more_choices` says that other choices of the request still generate.
  std::optional<std::string> finish_reason;
  // Bulk data for the downstream stages (one chunk); the worker hands it to the edge connectors.
  std::optional<std::vector<uint8_t>> payload;
  // New audio (mono float32 PCM in [-1, 1]) for the client, from a stage whose final output is
  // audio; audio_sample_rate is set whenever audio is.
  std::vector<float> audio;
  int audio_sample_rate = 0;
  // An image for the client, from a stage whose final output is images (diffusion).
  std::optional<GeneratedImage> image;
  std::optional<Error> error;                    // the request failed; it is finished
  std::vector<GeneratedTokenLogprobs> logprobs;  // one per token_ids entry when the request asked for logprobs
  int index = 0;                                 // which of the request's n choices (sampling parameter n)
  bool more_choices = false;
  // The prompt's length as the stage's model fed it (its media placeholders expanded); 0: the
  // length of the prompt the stage was given.
  int prompt_tokens = 0;
};

class StageRunner {
 public:
  virtual ~StageRunner() = default;

  // Queues a request. Throws omni::Error for a request this stage cannot run (bad sampling
  // parameters: kInvalidArgument naming the field); the stage goes on with other requests.
  virtual void add_request(StageRequest request) = 0;
  // Continues the input of a request added with input_open. Throws omni::Error for input the
  // request cannot take; the default refuses streamed input (kUnsupported).
  virtual void add_input(const std::string& request_id, StageInputChunk chunk);
  // Drops a request; unknown ids are ignored. No output for it follows.
  virtual void abort(const std::string& request_id) = 0;
  // Requests added and not yet finished or aborted.
  virtual size_t running_requests() const = 0;
  // Whether step() can make progress now; false while every request waits for streamed input,
  // so the worker sleeps instead of spinning.
  virtual bool can_step() const { return running_requests() > 0; }
  // Runs one step (one token for each running request, for an AR engine) and returns the new
  // outputs. Throws omni::Error only for a failure of the whole stage (fatal).
  virtual std::vector<StageOutput> step() = 0;
  // The timings of the parts of the steps since the previous call, oldest first (the worker times
  // each whole step itself as part "step"); the default has no finer parts.
  virtual std::vector<StepTiming> take_step_timings() { return {}; }

  // Sleep mode, level 1 (the worker does level 2 by destroying the runner and building it again):
  // with no running request, frees what can be rebuilt without the checkpoint — an AR stage's KV
  // cache — keeping the weights; wake_up() restores it and the stage serves as before. Both throw
  // omni::Error(kUnsupported) by default: this runner cannot sleep at level 1.
  virtual void sleep();
  virtual void wake_up();
  // Where the runner's model lives (the worker releases that device's freed memory after a sleep).
  virtual tensor::Device device() const { return tensor::Device::cpu(); }
};

// What a runner factory gets besides the engine args.
struct StageRunnerContext {
  int stage_id = 0;
  int replica = 0;
  std::string devices;  // the CUDA_VISIBLE_DEVICES the process was started with
};

// Builds a runner from the stage's engine args; throws omni::Error (kLoadFailed, kInvalidConfig…)
// naming what could not be loaded. This is the stage's initialisation.
using StageRunnerFactory =
    std::function<std::unique_ptr<StageRunner>(const Json& engine_args, const StageRunnerContext& context)>;

void register_stage_runner(const std::string& kind, StageRunnerFactory factory);
// The runner engine_args["runner"] names; kInvalidConfig naming the stage, the kind and the
// registered kinds when it is missing or unknown.
std::unique_ptr<StageRunner> make_stage_runner(const Json& engine_args, const StageRunnerContext& context);
std::vector<std::string> stage_runner_kinds();

}  // namespace omni::runtime
