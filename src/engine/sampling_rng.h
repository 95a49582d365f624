// A sequence's own random stream. Each sequence draws only from its own stream, once per sampled
// token, so a seeded request produces the same tokens whatever else shares its batches, and a
// preempted sequence resumes exactly where its stream stopped.
#pragma once

#include <cstdint>
#include <random>

namespace omni::engine {

class SamplingRng {
 public:
  explicit SamplingRng(uint64_t seed) : engine_(seed) {}

  // Uniform in [0, 1), from the top 53 bits (the same on every platform, unlike
  // std::uniform_real_distribution).
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  uint64_t next_u64() { return engine_(); }

 private:
  std::mt19937_64 engine_;
};

}  // namespace omni::engine
