// Element conversion between the floating dtypes on the host (checkpoint loading).
#pragma once

#include <cstddef>

#include "tensor/dtype.h"

namespace omni::tensor {

// `count` elements of `src` (stored as `from`) into `dst` as `to` (float32, bfloat16 or float16):
// the bytes when the dtypes agree, else through float32 (rounding to nearest even).
void convert_elements(DType from, const void* src, DType to, void* dst, size_t count);

}  // namespace omni::tensor
