#include "model/z_image/schedule.h"

#include "base/error.h"

namespace omni::model::z_image {

float Schedule::model_time(int i) const {
  const float t = timesteps.at(static_cast<size_t>(i));
  return (1000.0f - t) / 1000.0f;
}

Schedule make_schedule(const SchedulerConfig& config, int steps) {
  if (steps < 1) throw_error(ErrorCode::kInvalidArgument, "num_inference_steps must be at least 1, got {}", steps);
  Schedule s;
  // torch.linspace(1.0, 1 / steps, steps) in float32: from the start for the first half, from the
  // end for the second.
  const float start = 1.0f, end = static_cast<float>(1.0 / steps);
  const float delta = steps > 1 ? (end - start) / static_cast<float>(steps - 1) : 0.0f;
  const float shift = config.shift;
  for (int i = 0; i < steps; ++i) {
    const float u = i < steps / 2 ? start + delta * static_cast<float>(i)
                                  : end - delta * static_cast<float>(steps - i - 1);
    const float sigma = shift * u / (1.0f + (shift - 1.0f) * u);
    s.sigmas.push_back(sigma);
    s.timesteps.push_back(sigma * static_cast<float>(config.num_train_timesteps));
  }
  s.sigmas.push_back(0.0f);
  return s;
}

}  // namespace omni::model::z_image
