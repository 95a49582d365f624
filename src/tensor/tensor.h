// Tensor: a shaped, strided view of typed elements on one device.
//
// CUDA storage comes from the device's caching allocator (tensor/cuda/allocator.h); its bytes
// are only reachable through ops and to(), never through data() on the host.
//
// Storage is either owned (allocated by the device's allocator and shared between the tensors
// that view it; freed when the last one goes) or borrowed (the caller keeps the bytes alive for
// as long as any tensor views them, e.g. a memory-mapped checkpoint). Copying a Tensor copies
// the view, never the elements. A Tensor is not synchronised: concurrent writes to the same
// elements are the caller's problem, concurrent reads are fine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/device.h"
#include "tensor/dtype.h"

namespace omni::tensor {

using Shape = std::vector<int64_t>;

// "[2, 3, 4]".
std::string shape_to_string(const Shape& shape);
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  // Owned, contiguous, uninitialised.
  static Tensor empty(Shape shape, DType dtype, Device device = Device::cpu());
  // Owned, contiguous, zero-filled.
  static Tensor zeros(Shape shape, DType dtype, Device device = Device::cpu());
  // Borrowed contiguous view of `data`; the caller keeps it alive.
  static Tensor borrow(void* data, Shape shape, DType dtype, Device device = Device::cpu());

  bool defined() const { return data_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }  // in elements
  int rank() const { return static_cast<int>(shape_.size()); }
  // Size of dimension `d`; negative counts from the end.
  int64_t dim(int d) const { return shape_.at(d < 0 ? d + rank() : d); }
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;
  bool owns_storage() const { return storage_ != nullptr; }

  void* raw() const { return data_; }
  // Typed pointer to the first element; the type must match dtype() (checked).
  template <typename T>
  T* data() const;

  // Same elements, new shape (contiguous tensors only; one dimension may be -1).
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) of the first dimension (a view; keeps the storage alive).
  Tensor slice_rows(int64_t begin, int64_t end) const;

  // A contiguous owned copy of the elements (same dtype) on `device`. Copies that involve a CUDA
  // device run on its stream and return once the copy is complete, so host memory on either
  // side may be reused at once. kUnsupported for CUDA in a build without the CUDA backend.
  Tensor to(Device device) const;

 private:
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::kF32;
  Device device_;
};

}  // namespace omni::tensor
