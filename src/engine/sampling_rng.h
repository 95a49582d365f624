// A sequence's own random stream: Philox4x32-10 (tensor/philox.h) keyed by the sequence's seed,
// draw number `step` giving philox_uniform(seed, step). That is the uniform ops::sample draws
// with for SamplingParams{seed, step}, on the CPU and on the GPU, so the engine's host sampler and
// the device sampler continue one stream: a sequence's k-th random token uses draw k whichever
// path sampled it. Each sequence draws only from its own stream, once per non-greedy sampled
// token, so a seeded request produces the same tokens whatever else shares its batches, and a
// preempted sequence resumes exactly where its stream stopped.
#pragma once

#include <cstdint>

#include "tensor/philox.h"

namespace omni::engine {

class SamplingRng {
 public:
  explicit SamplingRng(uint64_t seed) : seed_(seed) {}

  uint64_t seed() const { return seed_; }
  // The number of draws taken so far: the `step` of the next one.
  uint64_t step() const { return step_; }
  // Takes the next draw without computing it (the device sampler computed it from seed and step).
  void skip() { ++step_; }
  // The next draw's uniform in [0, 1) (24 bits), as ops::sample computes it.
  float uniform() { return tensor::philox_uniform(seed_, step_++); }
  // 64 random bits from the next draw (seeds for requests that give none).
  uint64_t next_u64() {
    const uint64_t step = step_++;
    const tensor::Philox4x32 out =
        tensor::philox4x32_10({{static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), 0u, 0u}},
                              static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32));
    return (static_cast<uint64_t>(out.v[1]) << 32) | out.v[2];
  }

 private:
  uint64_t seed_;
  uint64_t step_ = 0;
};

}  // namespace omni::engine
