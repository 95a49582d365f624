// The kernels behind cuda::paged_attention (tensor/cuda/kernels.h), one file each. The dispatcher
// in attention.cu hands each sequence of a batch to one of them: one-token queries to the decode
// kernel, longer ones to the prefill kernel, and whatever those do not support (float32, head
// sizes they are not built for) to the general SIMT kernel. Each writes only the q rows of the
// sequences it is given; arguments are validated (tensor/ops.cc) before they get here.
//
// Each function but decode_fixed uploads its own per-call metadata (block tables, work lists)
// through pinned staging memory and queues its kernels on the device's stream; none synchronises.
#pragma once

#include <span>

#include "tensor/ops.h"

namespace omni::tensor::cuda::attention {

struct Geometry {
  int heads = 0, kv_heads = 0, head_dim = 0, block_size = 0;
  float scale = 1.0f;
  int window = 0;  // sliding window, 0 for none
};

// Flash-decoding: every sequence has query_len == 1. Keys are split into partitions handled by
// separate blocks when the batch alone would not fill the GPU, then merged by a second kernel; the
// query heads of one kv head share each K/V load.
bool decode_supports(DType dtype, int head_dim);
void decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, std::span<const ops::PagedSequence> seqs,
            const Geometry& g, Tensor& out);

// The same kernel with work fixed by the shapes alone (ops::paged_decode_attention): row b of q is
// sequence b, its length and table read on the device, split into a count chosen from the rows
// and the table width. Also built for head_dim 16 and 32 (small models, the tiny test checkpoints).
bool decode_fixed_supports(DType dtype, int head_dim);
void decode_fixed(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& context_lens,
                  const Tensor& block_tables, const Geometry& g, Tensor& out);

// Tiled flash attention on the tensor cores (mma.sync, bfloat16/float16 with float32
// accumulation): 64 query rows (tokens x the query heads of one kv head) per block, 64 keys per
// tile, causal and sliding-window masking per row.
bool prefill_supports(DType dtype, int head_dim);
void prefill(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, std::span<const ops::PagedSequence> seqs,
             const Geometry& g, Tensor& out);

// Any dtype, head_dim up to max_attention_head_dim(), any query length.
void general(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, std::span<const ops::PagedSequence> seqs,
             const Geometry& g, Tensor& out);

}  // namespace omni::tensor::cuda::attention
