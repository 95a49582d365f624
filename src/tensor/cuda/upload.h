// Loading host data into device memory (tensor/upload.h's CUDA half).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace omni::tensor::cuda {

// Copies `count` elements of `src_dtype` from host memory `src`, or when `fd` >= 0 from the same
// bytes in that file at `offset` (read with pread), to device memory `dst` as `dst_dtype` (float32, bfloat16, float16;
// the same dtype, or a conversion on the GPU, rounding to nearest even). The bytes travel in chunks of a few MB through
// pinned staging buffers reused across calls, queued on the device's stream; returns once the host has read all of
// `src` (the last copies may still be running). Returns 0, or the errno of a failed read (the copy is then incomplete).
// For loading weights.
int upload_elements(void* dst, DType dst_dtype, const void* src, int fd, int64_t offset, DType src_dtype, size_t count,
                    int index);

}  // namespace omni::tensor::cuda
