// tensor/uniform_fill.h's CUDA half: `count` elements of `dtype` at device memory `dst` =
// uniform_value(seed, first_index + i, lo, hi), rounded to the dtype, queued on the device's stream.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace omni::tensor::cuda {

void fill_uniform(void* dst, DType dtype, size_t count, uint64_t seed, uint64_t first_index, float lo, float hi,
                  int index);

}  // namespace omni::tensor::cuda
