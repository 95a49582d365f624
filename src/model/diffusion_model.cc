#include "model/diffusion_model.h"

#include <chrono>

namespace omni::model {

void DiffusionModel::step(std::span<DenoiseJob* const> jobs) {
  std::vector<DenoiseJob*> stepping;
  for (DenoiseJob* job : jobs) {
    if (!job->finished()) stepping.push_back(job);
  }
  const auto start = std::chrono::steady_clock::now();
  step_jobs(jobs);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (DenoiseJob* job : stepping) job->durations().add(kDiffusePhase, seconds);
}

RgbImage DiffusionModel::decode(DenoiseJob& job) {
  const PhaseTimer timer(job.durations(), kVaeDecodePhase);
  return decode_job(job);
}

}  // namespace omni::model
