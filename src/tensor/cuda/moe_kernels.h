// The CUDA implementations behind tensor/moe_ops.h (cuda/moe.cu): the router's top-k, the grouping
// of a batch's (token, choice) pairs by expert, and the products over each expert's rows. Called
// only by the dispatchers in tensor/moe_ops.cc, which have validated shapes, dtypes and devices;
// the values of the device-resident ints (experts, offsets, rows) are clamped by the kernels, never
// read back. Every function queues its kernels on the device's stream and returns at once; the
// grids depend only on the shapes, so a sequence of these ops can be recorded into a CUDA graph.
#pragma once

#include "tensor/tensor.h"

namespace omni::tensor::cuda {

void moe_route(const Tensor& logits, int top_k, bool norm_topk_prob, Tensor& experts, Tensor& weights);
void moe_group(const Tensor& experts, int num_experts, Tensor& offsets, Tensor& rows, Tensor& index);
void grouped_linear(const Tensor& x, const Tensor& rows, const Tensor& w, const Tensor& offsets, int64_t group_rows,
                    Tensor& out);
// Whether grouped_linear has a kernel for these operands: K a multiple of a 16-byte chunk, x and w
// starting 16-byte aligned.
bool grouped_linear_supports(const Tensor& x, const Tensor& w);

// Which product grouped_linear takes for `pairs` rows over `num_experts` experts (bfloat16/float16
// with at least kGroupedTileMinRows rows per expert on average and tile-aligned shapes: the
// tensor-core tile kernel; otherwise the kernel that streams each selected expert's weight once per
// eight rows). Exposed for tests and benchmarks.
inline constexpr int64_t kGroupedTileMinRows = 8;
bool grouped_linear_uses_tiles(const Tensor& x, const Tensor& w, int64_t pairs, int64_t num_experts);

}  // namespace omni::tensor::cuda
