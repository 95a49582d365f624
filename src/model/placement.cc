#include "model/placement.h"

#include "tensor/convert.h"
#include "tensor/upload.h"

namespace omni::model {

using tensor::DType;
using tensor::Tensor;

Tensor place(const Tensor& host_f32, DType dtype, tensor::Device device) {
  if (device.type == tensor::DeviceType::kCpu && dtype == DType::kF32) return host_f32;
  Tensor out = Tensor::empty(host_f32.shape(), dtype, device);
  if (out.numel() > 0) {
    tensor::copy_from_host({.memory = host_f32.raw()}, DType::kF32, static_cast<size_t>(host_f32.numel()), out, 0);
  }
  return out;
}

Tensor host_f32(const Tensor& t) {
  if (t.device().type == tensor::DeviceType::kCpu && t.dtype() == DType::kF32) return t;
  const Tensor host = t.device().type == tensor::DeviceType::kCpu ? t : t.to(tensor::Device::cpu());
  if (host.dtype() == DType::kF32) return host;
  Tensor out = Tensor::empty(host.shape(), DType::kF32);
  tensor::convert_elements(host.dtype(), host.raw(), DType::kF32, out.raw(), static_cast<size_t>(host.numel()));
  return out;
}

}  // namespace omni::model
