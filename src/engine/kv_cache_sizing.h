// How many KV blocks an engine gets: --num-gpu-blocks-override when set, else the memory budget
// (--kv-cache-memory-bytes, or on the CPU a default share of the free RAM) divided by the model's
// bytes per block. The pool must hold at least one sequence of max_model_len tokens.
#pragma once

#include <cstddef>

#include "engine/engine_config.h"
#include "model/causal_lm.h"
#include "tensor/backend.h"

namespace omni::engine {

// The default CPU KV budget: a quarter of the RAM available now (after the weights were loaded), at
// most 4 GiB (vLLM's CPU default KV space).
size_t default_cpu_kv_cache_bytes();

// The default KV budget of a model on a GPU: gpu_memory_utilization of the device's memory, minus
// what is already in use on it (this process's weights and context, other processes) and minus the
// model's activations for `max_tokens` tokens and `max_logit_rows` rows. Throws
// omni::Error(kInvalidConfig) naming gpu_memory_utilization when nothing is left or it is not in
// (0, 1].
size_t default_gpu_kv_cache_bytes(const model::CausalLm& model, double gpu_memory_utilization, int max_tokens,
                                  int max_logit_rows);

// The KV budget of a stage that owns `gpu_memory_utilization` of a device other stage processes
// may share (each stage of a pipeline on one GPU with its own share, as vLLM-Omni's deploy YAMLs
// give them): the share of the device's total, less what this process allocated between `at_start`
// (read before it loaded anything) and `now` (its weights and buffers), less `activation_bytes`.
// Memory other processes held at start does not count against the share, but the share must have
// been free then; memory they allocate meanwhile counts as this process's (the budget errs small).
// Throws omni::Error(kInvalidConfig) naming gpu_memory_utilization when it is not in (0, 1], when
// the share exceeds what was free at start, or when nothing is left for the KV cache.
size_t gpu_share_kv_cache_bytes(const tensor::DeviceMemory& at_start, const tensor::DeviceMemory& now,
                                double gpu_memory_utilization, size_t activation_bytes);

// Fills num_blocks, kv_bytes_per_block and max_model_len of `resolved` from `config`, the model's
// bytes per block and its max_position_embeddings. Throws omni::Error(kInvalidConfig) naming the
// settings when the pool cannot hold one max_model_len sequence (when max_model_len is derived, it
// is lowered to what the pool holds instead).
void size_kv_cache(const EngineConfig& config, size_t kv_bytes_per_block, int max_position_embeddings,
                   size_t available_bytes, ResolvedEngineConfig& resolved);

}  // namespace omni::engine
