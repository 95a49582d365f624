// An image a stage produced for the client: 8-bit RGB, rows top to bottom, pixels interleaved. It
// travels from the stage worker to the head in the OutputMessage (as bytes) and reaches the server
// in the ResponseEvent, which encodes it in the format the client asked for.
#pragma once

#include <cstdint>
#include <vector>

#include "base/json.h"

namespace omni::runtime {

struct GeneratedImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // height * width * 3
  int steps = 0;             // denoising steps it took
  double seconds = 0.0;      // from the request's start at the stage to its image
  // With enable_diffusion_pipeline_profiler: {"<PipelineClass>.<phase>": seconds} as vLLM-Omni's
  // DiffusionPipelineProfiler reports them (model/stage_durations.h); null without it.
  Json stage_durations;
};

}  // namespace omni::runtime
