// The CUDA implementations of the image-generator ops of ops.h (cuda/image.cu, cuda/dense_attention.cc with
// its softmax kernel in dense_attention_softmax.cu, cuda/dense_flash_attention.cu), under the contract of
// cuda/kernels.h: called only by the dispatchers in tensor/ops.cc after validation, queued on the device's stream,
// float32 arithmetic whatever the storage dtype. rotate_pairs' cos and sin are in x's dtype or float32.
#pragma once

#include "tensor/tensor.h"

namespace omni::tensor::cuda {

void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int padding, int stride, Tensor& out);
void group_norm(const Tensor& x, int groups, const Tensor& weight, const Tensor& bias, float eps, Tensor& out);
void silu(const Tensor& x, Tensor& out);
void tanh(const Tensor& x, Tensor& out);
void upsample_nearest2x(const Tensor& x, Tensor& out);
// ops::attention (the name `attention` is the namespace of the paged kernels): flash_attention where
// flash_attention_supports the operands, else materialised_attention.
void dense_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out);
// The fused kernel: bfloat16 or float16, head size 64 or 128, every operand 16-byte aligned and
// contiguous as ops::attention has them, scale > 0 and finite. One pass over the keys per 128
// queries with the softmax online; probabilities rounded to the dtype before the product with v,
// their sum taken before that rounding. No scratch memory. Throws kUnsupported for other operands.
bool flash_attention_supports(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const Tensor& out);
void flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out);
// The kernel's launch (dense_flash_attention.cu) for operands flash_attention_supports.
void launch_flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out);
// Scores q k^T in float32 through cuBLASLt, then softmax and p v; any float dtype and head size,
// scratch for up to 1 GiB of scores at a time from the device's allocator.
void materialised_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out);
// The softmax step of dense_attention: probs [R, N] (any float dtype; may be scores when float32) =
// softmax(scores * scale) of each row of scores [R, N] float32, in the CPU's order (the scaled
// maximum, exp of the scaled score minus it, times the inverse of the sum).
void scaled_softmax(const Tensor& scores, float scale, Tensor&& probs);
void rotate_pairs(Tensor& x, const Tensor& cos, const Tensor& sin);
void mul_columns(const Tensor& x, const Tensor& scale, Tensor& out);

}  // namespace omni::tensor::cuda
