// Host memory for tensors: 64-byte aligned (one cache line, the widest SIMD load) so kernels can
// use aligned vector loads on any row that starts at a multiple of 16 floats.
#pragma once

#include <cstddef>

namespace omni::tensor {

inline constexpr size_t kTensorAlignment = 64;

// Thread-safe. allocate(0) returns a valid unique pointer; a failure throws std::bad_alloc.
// Memory is not initialised.
class CpuAllocator {
 public:
  static void* allocate(size_t bytes);
  static void free(void* ptr) noexcept;
};

}  // namespace omni::tensor
