// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), a counter-based
// generator: the output is a pure function of (key, counter), so a draw depends only on the
// request's seed and the index of the draw, never on which other requests share the batch or on
// the backend. Compiled for the host and, inside .cu files, for the device.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define OMNI_HOST_DEVICE __host__ __device__
#else
#define OMNI_HOST_DEVICE
#endif

namespace omni::tensor {

struct Philox4x32 {
  uint32_t v[4];
};

// The 10-round Philox4x32 block for `counter` under `key`.
OMNI_HOST_DEVICE inline Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t* c = counter.v;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
    const uint32_t next[4] = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ key0, static_cast<uint32_t>(p1),
                              static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ key1, static_cast<uint32_t>(p0)};
    c[0] = next[0];
    c[1] = next[1];
    c[2] = next[2];
    c[3] = next[3];
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return counter;
}

// The uniform in [0, 1) (24 bits) of draw `step` of the stream `seed`.
OMNI_HOST_DEVICE inline float philox_uniform(uint64_t seed, uint64_t step) {
  const Philox4x32 counter{{static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), 0u, 0u}};
  const Philox4x32 out = philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return static_cast<float>(out.v[0] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace omni::tensor
