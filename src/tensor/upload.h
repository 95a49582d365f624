// Writing host data into tensors on any device, for model loading.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/tensor.h"

namespace omni::tensor {

// Host bytes to copy from: `memory`, which may also be read as `size` bytes of the open file `fd`
// from `offset` on (the same bytes: a file and its mapping). Reading a file that is in the page
// cache with pread copies it without setting up page tables, which first-touching a mapping does
// page by page; copies to a GPU read the file when fd >= 0.
struct HostSource {
  const void* memory = nullptr;
  int fd = -1;
  int64_t offset = 0;
};

// Writes `count` elements of `src_dtype` from `src` into the contiguous tensor `dst` at elements [dst_offset,
// dst_offset + count), converting to dst's dtype (float32, bfloat16 and float16 in any direction, rounding to nearest
// even; other dtypes only unconverted). On the CPU the copy is done when this returns. On CUDA it is
// queued on the device's stream through pinned staging buffers (cuda::upload_elements) with any
// conversion on the GPU, and `src` may be reused or unmapped as soon as this returns.
// kInvalidArgument for a non-contiguous `dst`, a range past its end or an impossible conversion;
// kLoadFailed when reading the file fails.
void copy_from_host(const HostSource& src, DType src_dtype, size_t count, Tensor& dst, size_t dst_offset);

}  // namespace omni::tensor
