// The flow-matching Euler schedule of diffusers' FlowMatchEulerDiscreteScheduler as ZImagePipeline
// sets it: sigmas s_i = shift * u_i / (1 + (shift - 1) * u_i) over u = linspace(1, 1 / N, N), then
// a final 0; timestep_i = 1000 * s_i and the transformer's time (1000 - timestep_i) / 1000. Every
// value is float32 computed in the order torch and NumPy compute it, so the schedule matches
// diffusers bit for bit. A step moves the latents x <- x + (s_{i+1} - s_i) * velocity.
#pragma once

#include <vector>

#include "model/z_image/config.h"

namespace omni::model::z_image {

struct Schedule {
  std::vector<float> sigmas;     // steps + 1, ending in 0
  std::vector<float> timesteps;  // steps: sigmas * num_train_timesteps

  int steps() const { return static_cast<int>(timesteps.size()); }
  // The transformer's time input at step i.
  float model_time(int i) const;
};

// steps >= 1 (else kInvalidArgument).
Schedule make_schedule(const SchedulerConfig& config, int steps);

}  // namespace omni::model::z_image
