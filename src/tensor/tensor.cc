#include "tensor/tensor.h"

#include <cstring>

#include "base/error.h"
#include "tensor/allocator.h"

#ifdef OMNI_HAVE_CUDA
#include "tensor/cuda/allocator.h"
#include "tensor/cuda/device.h"
#endif

namespace omni::tensor {
namespace {

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kF32;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::kI32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::kI64;
}
template <>
constexpr DType dtype_of<uint16_t>() {
  return DType::kBF16;
}

}  // namespace

std::string shape_to_string(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  for (int64_t d : shape) {
    if (d < 0)
      throw_error(ErrorCode::kInvalidArgument, "tensor shape {} has a negative dimension", shape_to_string(shape));
  }
  Tensor t;
  t.shape_ = std::move(shape);
  t.strides_ = contiguous_strides(t.shape_);
  t.dtype_ = dtype;
  t.device_ = device;
  if (device.type == DeviceType::kCpu) {
    t.storage_ = std::shared_ptr<void>(CpuAllocator::allocate(t.nbytes()), CpuAllocator::free);
  } else {
#ifdef OMNI_HAVE_CUDA
    const int index = device.index;
    t.storage_ = std::shared_ptr<void>(cuda::DeviceAllocator::allocate(t.nbytes(), index),
                                       [index](void* ptr) { cuda::DeviceAllocator::free(ptr, index); });
#else
    throw_error(ErrorCode::kUnsupported, "tensor allocation on {}: this build has no CUDA backend",
                device_name(device));
#endif
  }
  t.data_ = t.storage_.get();
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  if (device.type == DeviceType::kCpu) {
    std::memset(t.data_, 0, t.nbytes());
  } else {
#ifdef OMNI_HAVE_CUDA
    cuda::zero_bytes(t.data_, t.nbytes(), device.index);
#endif
  }
  return t;
}

Tensor Tensor::to(Device device) const {
  if (!is_contiguous()) throw_error(ErrorCode::kInternal, "to({}) of a non-contiguous tensor", device_name(device));
  Tensor t = empty(shape_, dtype_, device);
  if (device_.type == DeviceType::kCpu && device.type == DeviceType::kCpu) {
    std::memcpy(t.data_, data_, nbytes());
    return t;
  }
#ifdef OMNI_HAVE_CUDA
  if (device_.type == DeviceType::kCpu) {
    cuda::copy_bytes(t.data_, data_, nbytes(), cudaMemcpyHostToDevice, device.index);
  } else if (device.type == DeviceType::kCpu) {
    cuda::copy_bytes(t.data_, data_, nbytes(), cudaMemcpyDeviceToHost, device_.index);
  } else if (device_ == device) {
    cuda::copy_bytes(t.data_, data_, nbytes(), cudaMemcpyDeviceToDevice, device.index);
  } else {
    // Peer copy: finish the source device's queued work first, then copy on the destination's stream.
    cuda::synchronize(device_.index);
    cuda::copy_bytes(t.data_, data_, nbytes(), cudaMemcpyDefault, device.index);
  }
  return t;
#else
  throw_error(ErrorCode::kUnsupported, "copy from {} to {}: this build has no CUDA backend", device_name(device_),
              device_name(device));
#endif
}

Tensor Tensor::borrow(void* data, Shape shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.strides_ = contiguous_strides(t.shape_);
  t.dtype_ = dtype;
  t.device_ = device;
  t.data_ = data;
  return t;
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

template <typename T>
T* Tensor::data() const {
  if (dtype_ != dtype_of<T>() && !(dtype_ == DType::kF16 && dtype_of<T>() == DType::kBF16)) {
    throw_error(ErrorCode::kInternal, "tensor of {} read as {}", dtype_name(dtype_), dtype_name(dtype_of<T>()));
  }
  return static_cast<T*>(data_);
}
template float* Tensor::data<float>() const;
template int32_t* Tensor::data<int32_t>() const;
template int64_t* Tensor::data<int64_t>() const;
template uint16_t* Tensor::data<uint16_t>() const;

Tensor Tensor::reshape(Shape shape) const {
  if (!is_contiguous()) throw_error(ErrorCode::kInternal, "reshape of a non-contiguous tensor");
  int64_t known = 1;
  int inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      inferred = static_cast<int>(i);
    } else {
      known *= shape[i];
    }
  }
  if (inferred >= 0 && known > 0) shape[inferred] = numel() / known;
  if (shape_numel(shape) != numel()) {
    throw_error(ErrorCode::kInternal, "cannot reshape {} to {}", shape_to_string(shape_), shape_to_string(shape));
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.strides_ = contiguous_strides(t.shape_);
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  if (rank() == 0 || begin < 0 || end < begin || end > shape_[0]) {
    throw_error(ErrorCode::kInternal, "rows [{}, {}) out of range for shape {}", begin, end, shape_to_string(shape_));
  }
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.data_ = static_cast<char*>(data_) + begin * strides_[0] * static_cast<int64_t>(dtype_size(dtype_));
  return t;
}

}  // namespace omni::tensor
