// The CUDA implementations of tensor/dit_ops.h (cuda/dit.cu), under the contract of cuda/kernels.h:
// called only by the dispatchers in tensor/dit_ops.cc after validation, queued on the device's
// stream, float32 arithmetic and one rounding per output element.
#pragma once

#include "tensor/tensor.h"

namespace omni::tensor::cuda {

void modulated_rms_norm(const Tensor& x, const Tensor& weight, const Tensor& scale, float eps, Tensor& out);
void gated_rms_norm_add(Tensor& residual, const Tensor& y, const Tensor& weight, const Tensor& gate, float eps);
void qkv_norm_rotate(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps, const Tensor& cos,
                     const Tensor& sin, Tensor& q, Tensor& k, Tensor& v);

}  // namespace omni::tensor::cuda
