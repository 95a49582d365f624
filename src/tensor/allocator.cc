#include "tensor/allocator.h"

#include <cstdlib>
#include <new>

namespace omni::tensor {

void* CpuAllocator::allocate(size_t bytes) {
  size_t rounded = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  if (rounded == 0) rounded = kTensorAlignment;
  void* ptr = std::aligned_alloc(kTensorAlignment, rounded);
  if (ptr == nullptr) throw std::bad_alloc();
  return ptr;
}

void CpuAllocator::free(void* ptr) noexcept { std::free(ptr); }

}  // namespace omni::tensor
