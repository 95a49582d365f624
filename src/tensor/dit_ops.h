// The fused steps of a diffusion transformer block (Z-Image's S3-DiT, model/z_image/transformer.h):
// the adaLN-modulated RMSNorm in front of a product, the gated residual add of a sandwich-normed
// product's output, and the attention input (q/k RMSNorm and the rotation of one fused q/k/v
// product's output). Each is one kernel on CUDA, where the unfused sequence would read and write
// the [tokens, dim] activations several times; on the CPU each runs exactly the sequence of
// tensor/ops.h ops written beside it, so a CPU float32 forward is the same arithmetic fused or not.
//
// Arguments as tensor/ops.h says (contiguous, one device, one floating dtype except where noted);
// shapes are checked here and a mismatch is kInvalidArgument naming the op and the argument. On
// CUDA the arithmetic is float32 and each output element is rounded to the dtype once (the unfused
// sequence rounds after each op, so 16-bit results differ from it by about one rounding).
#pragma once

#include "tensor/tensor.h"

namespace omni::tensor::ops {

// out = rms_norm(x, weight, eps) * scale, scale along the last dimension (the adaLN "1 + scale"
// the caller computed): x [..., D], weight [D], scale [D], out like x (may be x).
// CPU: rms_norm(x, weight, eps, out); mul_columns(out, scale, out).
void modulated_rms_norm(const Tensor& x, const Tensor& weight, const Tensor& scale, float eps, Tensor& out);

// residual += rms_norm(y, weight, eps) * gate, gate along the last dimension: residual and y
// [..., D] of one shape, not overlapping; weight and gate [D]; y is not modified.
// CPU: rms_norm(y, weight, eps, tmp); add_scaled(residual, tmp, gate, residual).
void gated_rms_norm_add(Tensor& residual, const Tensor& y, const Tensor& weight, const Tensor& gate, float eps);

// The attention input of a block from one fused q/k/v product: qkv [T, 3 * heads * D] holds each
// token's query heads, then its key heads, then its value heads (the product with the to_q, to_k,
// to_v weights stacked by rows). q, k and v [T, heads, D] receive them, q and k each head
// RMS-normalised with q_norm / k_norm [D] (eps as rms_norm) and then rotated pair by pair as
// rotate_pairs does (cos, sin [T, D / 2], float32 or the dtype); v unchanged. Undefined q_norm
// and k_norm: rotation only. D even; q, k, v must not overlap qkv.
// CPU: copy the three column blocks; rms_norm(q, q_norm), rms_norm(k, k_norm) in place;
// rotate_pairs(q, cos, sin); rotate_pairs(k, cos, sin).
void qkv_norm_rotate(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps, const Tensor& cos,
                     const Tensor& sin, Tensor& q, Tensor& k, Tensor& v);

}  // namespace omni::tensor::ops
