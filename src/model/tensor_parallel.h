// How a decoder LM is cut across the ranks of a tensor-parallel group (vLLM's layout), and the
// loaders that read one rank's shard straight from the memory-mapped checkpoint.
//
//   q/k/v, gate/up   column-parallel: each rank holds a contiguous block of output rows
//                    (its query heads, its KV heads, its slice of the MLP's inner dimension)
//   o, down          row-parallel: each rank holds the matching input columns; the partial
//                    products are summed with an all-reduce
//   embedding,       vocabulary-parallel: each rank holds ceil(vocab / size) rows (the last rank's
//   lm_head          tail padded with zeros); embedding rows outside a rank's range read zero and
//                    the ranks' results are summed; logits are all-gathered
//
// Query heads must divide evenly among the ranks. KV heads are split when size divides them and
// replicated when they divide size (a rank then holds the one KV head its query heads read), as
// vLLM's QKVParallelLinear does. Plans are pure functions of the config; every rank computes the
// same plan.
#pragma once

#include <cstdint>
#include <string>

#include "model/hf_config.h"
#include "model/safetensors.h"
#include "tensor/tensor.h"

namespace omni::model {

struct DecoderShard {
  int rank = 0;
  int size = 1;
  int heads = 0;             // query heads of this rank: global heads [rank * heads, (rank + 1) * heads)
  int kv_heads = 0;          // KV heads this rank holds
  int kv_head_begin = 0;     // global index of the first
  int64_t intermediate = 0;  // MLP inner dimension of this rank
  int64_t vocab_begin = 0;   // first vocabulary row of this rank
  int64_t vocab_rows = 0;    // rows per rank (ceil(vocab / size)); the same on every rank
};

// Throws omni::Error(kInvalidConfig) naming `source`, the size and the count that does not
// divide (attention heads, KV heads, intermediate_size) for a size the model cannot be cut into.
DecoderShard plan_decoder_shard(const TextModelConfig& config, int rank, int size, const std::string& source);

// The loaders return tensors of `dtype` (float32, bfloat16 or float16; converted as
// Checkpoint::load does) on `device`, written there straight from the file mapping.
//
// Rows [begin, begin + count) of the 1-D or 2-D tensor `name` of full shape `shape`.
tensor::Tensor load_row_shard(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape,
                              int64_t begin, int64_t count, tensor::DType dtype = tensor::DType::kF32,
                              tensor::Device device = tensor::Device::cpu());
// Columns [begin, begin + count) of the 2-D tensor `name`.
tensor::Tensor load_column_shard(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape,
                                 int64_t begin, int64_t count, tensor::DType dtype = tensor::DType::kF32,
                                 tensor::Device device = tensor::Device::cpu());
// A vocabulary shard [rows, hidden] of the [vocab, hidden] tensor `name`: rows [begin,
// begin + count) of the tensor where they exist, zeros past its end and in any extra rows.
tensor::Tensor load_vocab_shard(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape,
                                int64_t begin, int64_t count, int64_t rows, tensor::DType dtype = tensor::DType::kF32,
                                tensor::Device device = tensor::Device::cpu());

}  // namespace omni::model
