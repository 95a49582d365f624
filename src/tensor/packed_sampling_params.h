// One row of ops::SamplingParams as the backends' sampling kernels read it from memory: the device
// copy sample() uploads per call and the buffer sample_packed() reads (ops.h). Twelve 4-byte words
// (ops::kPackedSamplingParamsWords); the 64-bit seed and step are split into halves so the struct
// has no padding and the same layout on the host and the device.
#pragma once

#include <cstdint>

#include "tensor/sample_packed.h"

namespace omni::tensor {

struct PackedSamplingParams {
  float temperature, top_p, min_p;
  int32_t top_k;
  float repetition_penalty, presence_penalty, frequency_penalty;
  uint32_t seed_lo, seed_hi, step_lo, step_hi;
  int32_t unused;
};
static_assert(sizeof(PackedSamplingParams) == ops::kPackedSamplingParamsWords * 4);

inline PackedSamplingParams pack(const ops::SamplingParams& p) {
  return {p.temperature,
          p.top_p,
          p.min_p,
          p.top_k,
          p.repetition_penalty,
          p.presence_penalty,
          p.frequency_penalty,
          static_cast<uint32_t>(p.seed),
          static_cast<uint32_t>(p.seed >> 32),
          static_cast<uint32_t>(p.step),
          static_cast<uint32_t>(p.step >> 32),
          0};
}

// The fields sample_row reads (the penalty fields too; the token spans stay empty).
inline ops::SamplingParams unpack(const PackedSamplingParams& p) {
  ops::SamplingParams out;
  out.temperature = p.temperature;
  out.top_p = p.top_p;
  out.min_p = p.min_p;
  out.top_k = p.top_k;
  out.repetition_penalty = p.repetition_penalty;
  out.presence_penalty = p.presence_penalty;
  out.frequency_penalty = p.frequency_penalty;
  out.seed = (static_cast<uint64_t>(p.seed_hi) << 32) | p.seed_lo;
  out.step = (static_cast<uint64_t>(p.step_hi) << 32) | p.step_lo;
  return out;
}

}  // namespace omni::tensor
