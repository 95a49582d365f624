// The settings of one autoregressive engine, with vLLM's names and defaults. Zero / absent fields
// mean "derive": ArEngine resolves them against the model and the machine (ResolvedEngineConfig).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "tensor/backend.h"

namespace omni::engine {

struct EngineConfig {
  int max_num_seqs = 256;
  // Tokens per step over all sequences; 0 = 2048 with chunked prefill, else max_model_len.
  int max_num_batched_tokens = 0;
  bool enable_chunked_prefill = true;
  bool enable_prefix_caching = true;
  // > 0: exactly this many KV blocks, whatever the memory budget.
  int num_gpu_blocks_override = 0;
  // The KV cache memory budget; absent = default_cpu_kv_cache_bytes() on the CPU, and on a GPU what
  // gpu_memory_utilization leaves after the weights, the activations and other processes.
  std::optional<size_t> kv_cache_memory_bytes;
  // Fraction of the GPU's memory this engine's process may hold (weights, activations, KV cache).
  double gpu_memory_utilization = 0.9;
  // Longest sequence (prompt + output); 0 = the model's max_position_embeddings, lowered to what the
  // KV cache can hold when the budget was not set explicitly.
  int max_model_len = 0;
  // Seeds the random streams of requests without a seed (deterministic per engine, not per request).
  uint64_t seed = 0;
  // vLLM's enforce_eager: no CUDA graphs. On a GPU, decode steps are still padded to the sizes of
  // decode_batch_sizes.h and run the same ops, launched one by one, so the output is the same.
  bool enforce_eager = false;
  // vLLM's async_scheduling: the engine schedules step N+1 while step N runs on the device, assuming
  // every running sequence gets one more token, and reads step N's ids afterwards (ArEngine). The
  // outputs are the same as without it.
  bool async_scheduling = false;
  // The device's memory before the stage loaded anything. Set (on a GPU, for an embedding-input model,
  // model/embedding_input_lm.h): the KV budget is this stage's gpu_memory_utilization share of the
  // device (gpu_share_kv_cache_bytes), so stages sharing a device keep their own shares.
  std::optional<tensor::DeviceMemory> memory_at_start;
};

struct ResolvedEngineConfig {
  int max_num_seqs = 0;
  int max_num_batched_tokens = 0;
  bool enable_chunked_prefill = true;
  bool enable_prefix_caching = true;
  int max_model_len = 0;
  int num_blocks = 0;
  size_t kv_bytes_per_block = 0;
  // The sizes decode steps are padded to (empty: the model runs them unpadded, e.g. on the CPU) and
  // whether each is a CUDA graph.
  std::vector<int> decode_batch_sizes;
  bool cuda_graphs = false;
  bool async_scheduling = false;
};

}  // namespace omni::engine
