// The batch sizes decode steps are padded to on a GPU (CausalLm::prepare_decode_steps), one CUDA
// graph each: vLLM's default capture sizes, 1, 2, 4, then every multiple of 8 below 256 and every
// multiple of 16 from 256, up to the first size that holds max_num_seqs, never past
// kMaxDecodeBatchSize. A step of n sequences runs as the smallest size that holds n: at most 7 (15
// past 256) padding rows, a few percent of a step whose cost is reading the weights once.
#pragma once

#include <vector>

namespace omni::engine {

// Larger decode batches run unpadded and eagerly (vLLM's cap on captured sizes).
inline constexpr int kMaxDecodeBatchSize = 512;

// Ascending; empty when max_num_seqs < 1.
std::vector<int> decode_batch_sizes(int max_num_seqs);

}  // namespace omni::engine
