// How many KV blocks an engine gets: --num-gpu-blocks-override when set, else the memory budget
// (--kv-cache-memory-bytes, or on the CPU a default share of the free RAM) divided by the model's
// bytes per block. The pool must hold at least one sequence of max_model_len tokens.
#pragma once

#include <cstddef>

#include "engine/engine_config.h"

namespace omni::engine {

// The default CPU KV budget: a quarter of the RAM available now (after the weights were loaded), at
// most 4 GiB (vLLM's CPU default KV space).
size_t default_cpu_kv_cache_bytes();

// Fills num_blocks, kv_bytes_per_block and max_model_len of `resolved` from `config`, the model's
// bytes per block and its max_position_embeddings. Throws omni::Error(kInvalidConfig) naming the
// settings when the pool cannot hold one max_model_len sequence (when max_model_len is derived, it
// is lowered to what the pool holds instead).
void size_kv_cache(const EngineConfig& config, size_t kv_bytes_per_block, int max_position_embeddings,
                   size_t available_bytes, ResolvedEngineConfig& resolved);

}  // namespace omni::engine
