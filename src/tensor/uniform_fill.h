// Filling a tensor with reproducible pseudo-random values, for models loaded with random weights
// (`--load-format dummy`, model/safetensors.h's Checkpoint::random): element i of a fill gets
// uniform_value(seed, first_index + i, lo, hi), a pure function computed the same way on the host
// and on a GPU (the same bits on both), so a random model needs no file and no host-side loop over
// its billions of weights. Not for anything that needs statistical quality beyond "spread out".
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/tensor.h"

#ifdef __CUDACC__
#define OMNI_UNIFORM_HOST_DEVICE __host__ __device__
#else
#define OMNI_UNIFORM_HOST_DEVICE
#include <cmath>
#endif

namespace omni::tensor {

// lo + (hi - lo) * u with u = the top 24 bits of splitmix64's output for (seed, index), in [0, 1).
OMNI_UNIFORM_HOST_DEVICE inline float uniform_value(uint64_t seed, uint64_t index, float lo, float hi) {
  uint64_t x = seed + (index + 1) * 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  const float u = static_cast<float>(x >> 40) * 5.9604644775390625e-8f;  // 2^-24: exact
#ifdef __CUDA_ARCH__
  return __fmaf_rn(hi - lo, u, lo);
#else
  return std::fma(hi - lo, u, lo);
#endif
}

// Elements [dst_offset, dst_offset + count) of the contiguous float32/bfloat16/float16 tensor `dst`
// (any device; rounded to its dtype, nearest even) = uniform_value(seed, first_index + i, lo, hi).
// On a GPU the fill is queued on the device's stream. kInvalidArgument for a range past the end
// or a dtype that is not floating.
void fill_uniform(Tensor& dst, size_t dst_offset, size_t count, uint64_t seed, uint64_t first_index, float lo,
                  float hi);

}  // namespace omni::tensor
