// The device-side steps of a mixture-of-experts layer (model/moe_mlp.h), for the CUDA backend:
// routing, grouping the batch's (token, choice) pairs by expert, and the products over each expert's
// rows, all without reading anything back to the host, so that a MoE layer can be recorded into a
// CUDA graph and queued behind the step before it. The CPU has no use for them (the host router of
// model/moe_mlp.cc is its path); CPU tensors are kUnsupported naming the op.
//
// A layer runs: linear(x, router) -> logits; moe_route -> experts, weights; moe_group -> offsets,
// rows, index; grouped_linear(x through rows, gate_up) -> gate_up rows; silu_and_mul; grouped_linear
// (act, down) -> expert outputs; gather_weighted_sum(expert outputs, index, weights) -> out.
//
// Shapes and dtypes are checked here (kInvalidArgument naming the op and the argument); the values
// of the int32 tensors these ops produce are trusted by the next op (clamped into range, never
// checked on the host).
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace omni::tensor::ops {

// Per token t of logits [T, E] (f): softmax in float32, the top_k experts in descending order of
// probability (ties: the lower index first) into experts [T, top_k] i32, and their probabilities
// (renormalised to sum to 1 when norm_topk_prob) rounded to the dtype into weights [T, top_k] (f, as
// logits). 1 <= top_k <= min(E, 64).
void moe_route(const Tensor& logits, int top_k, bool norm_topk_prob, Tensor& experts, Tensor& weights);

// Groups the pairs of experts [T, K] i32 (values in [0, num_experts), as moe_route writes them) by
// expert: offsets [num_experts + 1] i32 (expert e owns grouped rows [offsets[e], offsets[e + 1])),
// rows [T * K] i32 (the token of each grouped row) and index [T, K] i32 (the grouped row of token
// t's k-th pair). The order of the rows inside an expert's range is unspecified. 1 <= num_experts <=
// 4096; at most 2^31 - 1 pairs.
void moe_group(const Tensor& experts, int num_experts, Tensor& offsets, Tensor& rows, Tensor& index);

// out[p, :] = x[rows[p], :] @ w_e^T for every grouped row p of expert e (offsets as moe_group
// writes them), where w [E * N, K] holds expert e's [N, K] weight at rows [e * N, (e + 1) * N);
// rows undefined: x[p, :] (x then has out's rows). x [R, K] f, rows [P] i32 or undefined, offsets
// [E + 1] i32, out [P, N] in x's dtype; all on one CUDA device, float32 accumulation, each output
// rounded once. `group_rows`: the most rows one expert can hold (the tokens, for top-k routing, or
// P): the few-row kernel is sized by it. Needs K a multiple of 16 bytes and x, w 16-byte aligned
// (grouped_linear_supports); else kInvalidArgument.
void grouped_linear(const Tensor& x, const Tensor& rows, const Tensor& w, const Tensor& offsets, int64_t group_rows,
                    Tensor& out);
bool grouped_linear_supports(const Tensor& x, const Tensor& w);

}  // namespace omni::tensor::ops
