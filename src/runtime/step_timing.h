// The duration of one part of one engine step of a stage (the whole step, a model's forward, a
// per-step sub-model…): stage runners and workers measure them, heartbeats carry them to
// the head, which keeps them in its omnistage:stage_step_seconds{stage, part} histogram.
#pragma once

#include <string>

namespace omni::runtime {

struct StepTiming {
  std::string part;
  double seconds = 0;
};

}  // namespace omni::runtime
