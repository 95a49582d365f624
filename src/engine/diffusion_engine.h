// The engine of a diffusion stage (vLLM-Omni's diffusion engine): requests are batched up to
// max_num_seqs, a batch starts when it is full or its oldest request has waited
// request_batch_max_wait_ms, and a batch runs until its images are decoded. With step_execution
// each step() is one denoising step of the running batch, so requests that arrive join the batch
// between steps (up to max_num_seqs) and an abort takes effect between steps; without it, one
// step() runs the whole batch to its images. Each request's noise comes from its own seed and the
// model steps each job as it would alone (model/diffusion_model.h), so batching changes no image.
//
// Threading: one thread (the stage's loop) calls everything. The model is borrowed and must
// outlive the engine.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "model/diffusion_model.h"

namespace omni::engine {

struct DiffusionEngineConfig {
  int max_num_seqs = 1;
  double request_batch_max_wait_ms = 0.0;
  bool step_execution = false;
};

// What one step reports for a request: its image once it is finished, or its error.
struct ImageOutput {
  std::string request_id;
  std::optional<model::RgbImage> image;
  std::optional<Error> error;
  int steps_done = 0;
  int total_steps = 0;
  // The request's phases (model/stage_durations.h): text encoder, denoising loop, VAE decode.
  model::StageDurations durations;
};

// One timed part of the engine's work since the last take_part_times(): "denoise_step" (one
// denoising step of the running batch) or "vae_decode" (one image's decode).
struct EnginePartTime {
  std::string part;
  double seconds = 0;
};

class DiffusionEngine {
 public:
  // kInvalidConfig naming the field for max_num_seqs < 1 or a negative wait.
  DiffusionEngine(model::DiffusionModel& model, DiffusionEngineConfig config);

  // Encodes the prompt and prepares the latents now (model::DiffusionModel::start): a bad request
  // throws its omni::Error here and is not queued. A duplicate id is kInvalidArgument.
  void add_request(const std::string& request_id, const model::ImageRequest& request);
  // Drops the request (waiting or running) before the next step; unknown ids are ignored.
  void abort(const std::string& request_id);
  size_t num_requests() const { return waiting_.size() + running_.size(); }
  // Whether step() would do something now: a batch is running, or enough requests wait (a full
  // batch, or the oldest waited request_batch_max_wait_ms).
  bool has_ready_work() const;
  // See the header comment. Returns one output per request that finished (image) in this step.
  std::vector<ImageOutput> step();

  const DiffusionEngineConfig& config() const { return config_; }
  // Steps run since construction, over all batches (for logs and tests).
  int64_t denoising_steps() const { return denoising_steps_; }
  // The part times since the last call (for the stage's step metrics), oldest first.
  std::vector<EnginePartTime> take_part_times() { return std::exchange(part_times_, {}); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::string id;
    std::unique_ptr<model::DenoiseJob> job;
    Clock::time_point arrived;
  };
  void admit();
  void denoise_once(std::vector<ImageOutput>& outputs);

  model::DiffusionModel& model_;
  DiffusionEngineConfig config_;
  std::deque<Entry> waiting_;
  std::vector<Entry> running_;
  int64_t denoising_steps_ = 0;
  std::vector<EnginePartTime> part_times_;
};

}  // namespace omni::engine
