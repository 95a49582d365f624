// Standard-normal noise from a seed, the same on every backend and whatever else runs: the
// starting latents of diffusion and flow-matching samplers (Z-Image, Qwen2.5-Omni's token2wav)
// when a request gives a seed rather than its noise.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace omni::model {

// A float32 host tensor of `shape` whose element i is a Box-Muller normal of the Philox stream
// (seed, i / 2).
tensor::Tensor seeded_standard_normal(const tensor::Shape& shape, uint64_t seed);

}  // namespace omni::model
