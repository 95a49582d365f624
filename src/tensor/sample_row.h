// The host definition of one draw of ops::sample (tensor/ops.h): the CPU backend samples every row
// with it, and the engine's host sampler (engine/sampler.h) calls it after the logits processors
// the device sampler lacks, so that a seeded request draws the same tokens whichever path a step
// takes. The CUDA kernel (tensor/cuda/sampling.cu) implements the same rules and the same Philox
// uniform; its float sums run in another order, so an id can differ only where the uniform lands
// within rounding of a boundary between two tokens' cumulative mass.
#pragma once

#include <cstdint>
#include <span>

#include "tensor/ops.h"

namespace omni::tensor {

// The id that ops::sample draws from one row of float32 logits with `params`, the penalties
// excepted (the row is taken as already penalised; params' penalty fields and token spans are not
// read): greedy (temperature <= 0 or top_k == 1) takes the argmax, the lowest id on ties; otherwise
// the top-k, min-p and top-p cut-offs give a threshold on the logits, and the draw walks the kept
// tokens in vocabulary order until the cumulative weight exp((x - max) / temperature), summed in
// float32, exceeds philox_uniform(seed, step) times the kept total. Rows whose logits are all -inf
// or NaN give the argmax rule's answer. Thread-safe (scratch is per thread).
int32_t sample_row(std::span<const float> logits, const ops::SamplingParams& params);

}  // namespace omni::tensor
