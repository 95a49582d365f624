// The durations of the phases of one diffusion request, as vLLM-Omni's DiffusionPipelineProfiler
// reports them (--enable-diffusion-pipeline-profiler): seconds by phase, added up over the calls
// of the request (a phase timed twice, like the text encoder under classifier-free guidance, sums).
// The phases every diffusion model records are named as vLLM-Omni names the methods it wraps;
// to_json() prefixes them with the pipeline class (ZImagePipeline.diffuse, ...), as vLLM-Omni does.
// A plain value; not thread-safe.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/json.h"

namespace omni::model {

// The text encoder's forward passes (the prompt, and the negative prompt with CFG).
inline constexpr std::string_view kTextEncoderPhase = "text_encoder.forward";
// The denoising loop: every step the request took part in (a batched step counts whole for each).
inline constexpr std::string_view kDiffusePhase = "diffuse";
// The VAE decoder.
inline constexpr std::string_view kVaeDecodePhase = "vae.decode";

class StageDurations {
 public:
  void add(std::string_view phase, double seconds);
  // 0 for a phase never timed.
  double seconds(std::string_view phase) const;
  bool empty() const { return entries_.empty(); }
  // In the order the phases were first timed.
  const std::vector<std::pair<std::string, double>>& entries() const { return entries_; }
  // {"<prefix>.<phase>": seconds, ...}; no prefix when `prefix` is empty.
  Json to_json(std::string_view prefix) const;

 private:
  std::vector<std::pair<std::string, double>> entries_;
};

// Adds the time from construction to destruction (an exception included) to `durations` under `phase`.
class PhaseTimer {
 public:
  PhaseTimer(StageDurations& durations, std::string_view phase)
      : durations_(durations), phase_(phase), start_(std::chrono::steady_clock::now()) {}
  ~PhaseTimer() {
    durations_.add(phase_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  StageDurations& durations_;
  std::string_view phase_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace omni::model
