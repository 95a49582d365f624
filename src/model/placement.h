// Where a model component's tensors live: pipelines keep their glue (Z-Image's latents and
// scheduler, an encoder's inputs and outputs) on the host in float32, and the components run on
// their device in their dtype. These move host float32 tensors there and back.
#pragma once

#include "tensor/tensor.h"

namespace omni::model {

// Where a component runs: its device and the dtype of its weights and activations (float32 on the
// CPU; float32, bfloat16 or float16 on CUDA).
struct Placement {
  tensor::Device device = tensor::Device::cpu();
  tensor::DType dtype = tensor::DType::kF32;
};

// A host float32 tensor on `device` in `dtype`: the tensor itself on the CPU in float32, else a copy
// (converted on the GPU, queued on its stream; `host` may be reused at once).
tensor::Tensor place(const tensor::Tensor& host_f32, tensor::DType dtype, tensor::Device device);

// A float32 host copy of `t` (any device, float32/bfloat16/float16); waits for the device. A host
// float32 tensor is returned as it is.
tensor::Tensor host_f32(const tensor::Tensor& t);

}  // namespace omni::model
