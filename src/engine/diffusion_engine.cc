#include "engine/diffusion_engine.h"

#include <algorithm>

#include "base/log.h"

namespace omni::engine {

DiffusionEngine::DiffusionEngine(model::DiffusionModel& model, DiffusionEngineConfig config)
    : model_(model), config_(config) {
  if (config_.max_num_seqs < 1) {
    throw_error(ErrorCode::kInvalidConfig, "diffusion engine: max_num_seqs must be >= 1, got {}", config_.max_num_seqs);
  }
  if (config_.request_batch_max_wait_ms < 0) {
    throw_error(ErrorCode::kInvalidConfig, "diffusion engine: request_batch_max_wait_ms must be >= 0, got {}",
                config_.request_batch_max_wait_ms);
  }
}

void DiffusionEngine::add_request(const std::string& request_id, const model::ImageRequest& request) {
  const auto known = [&](const Entry& e) { return e.id == request_id; };
  if (std::any_of(waiting_.begin(), waiting_.end(), known) || std::any_of(running_.begin(), running_.end(), known)) {
    throw_error(ErrorCode::kInvalidArgument, "diffusion engine: request {} is already queued", request_id);
  }
  waiting_.push_back({request_id, model_.start(request), Clock::now()});
}

void DiffusionEngine::abort(const std::string& request_id) {
  const auto match = [&](const Entry& e) { return e.id == request_id; };
  for (const auto* queue : {&running_}) {
    for (const Entry& e : *queue) {
      if (match(e)) {
        spdlog::info("diffusion: request {} aborted after {} of {} steps", e.id, e.job->steps_done(),
                     e.job->total_steps());
      }
    }
  }
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), match), waiting_.end());
  running_.erase(std::remove_if(running_.begin(), running_.end(), match), running_.end());
}

bool DiffusionEngine::has_ready_work() const {
  if (!running_.empty()) return true;
  if (waiting_.empty()) return false;
  if (static_cast<int>(waiting_.size()) >= config_.max_num_seqs) return true;
  const double waited_ms = std::chrono::duration<double, std::milli>(Clock::now() - waiting_.front().arrived).count();
  return waited_ms >= config_.request_batch_max_wait_ms;
}

void DiffusionEngine::admit() {
  while (!waiting_.empty() && static_cast<int>(running_.size()) < config_.max_num_seqs) {
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

void DiffusionEngine::denoise_once(std::vector<ImageOutput>& outputs) {
  std::vector<model::DenoiseJob*> jobs;
  for (Entry& e : running_) jobs.push_back(e.job.get());
  const auto started = Clock::now();
  model_.step(jobs);
  const double step_s = std::chrono::duration<double>(Clock::now() - started).count();
  part_times_.push_back({"denoise_step", step_s});
  ++denoising_steps_;
  for (const Entry& e : running_) {
    spdlog::debug("diffusion request {}: step {}/{} ({:.3f} s, batch of {})", e.id, e.job->steps_done(),
                  e.job->total_steps(), step_s, running_.size());
  }
  // Finished jobs are decoded and leave the batch.
  std::vector<Entry> still;
  for (Entry& e : running_) {
    if (!e.job->finished()) {
      still.push_back(std::move(e));
      continue;
    }
    ImageOutput out;
    out.request_id = e.id;
    out.steps_done = e.job->steps_done();
    out.total_steps = e.job->total_steps();
    const auto decoding = Clock::now();
    try {
      out.image = model_.decode(*e.job);
    } catch (const Error& err) {
      out.error = err;
    }
    part_times_.push_back({"vae_decode", std::chrono::duration<double>(Clock::now() - decoding).count()});
    out.durations = e.job->durations();
    outputs.push_back(std::move(out));
  }
  running_ = std::move(still);
}

std::vector<ImageOutput> DiffusionEngine::step() {
  std::vector<ImageOutput> outputs;
  if (running_.empty() && !has_ready_work()) return outputs;
  // With step execution, waiting requests join between steps; otherwise only a new batch takes them.
  if (config_.step_execution || running_.empty()) admit();
  if (running_.empty()) return outputs;
  if (config_.step_execution) {
    denoise_once(outputs);
  } else {
    while (!running_.empty()) denoise_once(outputs);
  }
  return outputs;
}

}  // namespace omni::engine
