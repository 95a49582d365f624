#include "engine/kv_cache_sizing.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <string>

#include "base/error.h"
#include "base/log.h"
#include "engine/kv_cache_manager.h"
#include "model/causal_lm.h"
#include "tensor/backend.h"

namespace omni::engine {

namespace {

constexpr size_t kMaxDefaultKvBytes = size_t{4} << 30;

size_t available_ram_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  long pages = sysconf(_SC_AVPHYS_PAGES);
  long page_size = sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page_size) : 0;
}

}  // namespace

size_t default_cpu_kv_cache_bytes() { return std::min(available_ram_bytes() / 4, kMaxDefaultKvBytes); }

size_t default_gpu_kv_cache_bytes(const model::CausalLm& model, double gpu_memory_utilization, int max_tokens,
                                  int max_logit_rows) {
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0)) {
    throw_error(ErrorCode::kInvalidConfig, "gpu_memory_utilization must be in (0, 1], got {}", gpu_memory_utilization);
  }
  const tensor::Device device = model.device();
  const tensor::DeviceMemory memory = tensor::cuda_memory_info(device.index);
  const size_t in_use = memory.total_bytes - memory.free_bytes;
  const size_t allowed = static_cast<size_t>(gpu_memory_utilization * static_cast<double>(memory.total_bytes));
  const size_t activations = model.activation_bytes(max_tokens, max_logit_rows);
  if (allowed <= in_use + activations) {
    throw_error(ErrorCode::kInvalidConfig,
                "gpu_memory_utilization {} allows {} MiB of {}'s {} MiB, but {} MiB are in use (weights, other "
                "processes) and the activations need {} MiB: nothing is left for the KV cache; raise "
                "gpu_memory_utilization or set num_gpu_blocks_override",
                gpu_memory_utilization, allowed >> 20, tensor::device_name(device), memory.total_bytes >> 20,
                in_use >> 20, activations >> 20);
  }
  const size_t budget = allowed - in_use - activations;
  spdlog::info("{}: {} MiB of {} MiB in use; KV budget {} MiB (gpu_memory_utilization {}, activations {} MiB)",
               tensor::device_name(device), in_use >> 20, memory.total_bytes >> 20, budget >> 20,
               gpu_memory_utilization, activations >> 20);
  return budget;
}

size_t gpu_share_kv_cache_bytes(const tensor::DeviceMemory& at_start, const tensor::DeviceMemory& now,
                                double gpu_memory_utilization, size_t activation_bytes) {
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0)) {
    throw_error(ErrorCode::kInvalidConfig, "gpu_memory_utilization must be in (0, 1], got {}", gpu_memory_utilization);
  }
  const size_t share = static_cast<size_t>(gpu_memory_utilization * static_cast<double>(at_start.total_bytes));
  if (share > at_start.free_bytes) {
    throw_error(ErrorCode::kInvalidConfig,
                "gpu_memory_utilization {} asks for {} MiB of the device's {} MiB, but only {} MiB were free when the "
                "stage started (other stages or processes hold the rest): lower it or place the stage on another "
                "device",
                gpu_memory_utilization, share >> 20, at_start.total_bytes >> 20, at_start.free_bytes >> 20);
  }
  const size_t own = at_start.free_bytes > now.free_bytes ? at_start.free_bytes - now.free_bytes : 0;
  if (share <= own + activation_bytes) {
    throw_error(ErrorCode::kInvalidConfig,
                "gpu_memory_utilization {} gives the stage {} MiB, but its weights and buffers take {} MiB and its "
                "activations {} MiB: nothing is left for the KV cache; raise gpu_memory_utilization or set "
                "num_gpu_blocks_override",
                gpu_memory_utilization, share >> 20, own >> 20, activation_bytes >> 20);
  }
  return share - own - activation_bytes;
}

void size_kv_cache(const EngineConfig& config, size_t kv_bytes_per_block, int max_position_embeddings,
                   size_t available_bytes, ResolvedEngineConfig& resolved) {
  if (kv_bytes_per_block == 0) throw_error(ErrorCode::kInternal, "the model reports 0 bytes per KV block");
  resolved.kv_bytes_per_block = kv_bytes_per_block;
  const bool explicit_size = config.num_gpu_blocks_override > 0 || config.kv_cache_memory_bytes.has_value();
  size_t budget = config.kv_cache_memory_bytes.value_or(available_bytes);
  std::string source = config.num_gpu_blocks_override > 0 ? "num_gpu_blocks_override"
                       : config.kv_cache_memory_bytes     ? fmt::format("kv_cache_memory_bytes={}", budget)
                                                          : fmt::format("the default KV budget of {} bytes", budget);
  size_t blocks = config.num_gpu_blocks_override > 0 ? static_cast<size_t>(config.num_gpu_blocks_override)
                                                     : budget / kv_bytes_per_block;
  blocks = std::min<size_t>(blocks, std::numeric_limits<int32_t>::max());

  int max_model_len = config.max_model_len > 0 ? config.max_model_len : max_position_embeddings;
  if (max_model_len <= 0) {
    throw_error(ErrorCode::kInvalidConfig,
                "max_model_len is not set and the model declares no max_position_embeddings");
  }
  if (!explicit_size) {
    // A default budget never needs to exceed what max_num_seqs full-length sequences could use.
    size_t useful = static_cast<size_t>(config.max_num_seqs) *
                    static_cast<size_t>(KvCacheManager::blocks_for_tokens(max_model_len));
    blocks = std::min(blocks, useful);
  }
  size_t needed = static_cast<size_t>(KvCacheManager::blocks_for_tokens(max_model_len));
  if (blocks < needed) {
    if (config.max_model_len > 0 || blocks == 0) {
      throw_error(ErrorCode::kInvalidConfig,
                  "the KV cache ({} blocks of {} tokens from {}) cannot hold one sequence of max_model_len {} "
                  "(needs {} blocks of {} bytes); raise kv_cache_memory_bytes or num_gpu_blocks_override, or "
                  "lower max_model_len",
                  blocks, model::kKvBlockSize, source, max_model_len, needed, kv_bytes_per_block);
    }
    int fitted = static_cast<int>(blocks) * model::kKvBlockSize;
    spdlog::warn("max_model_len lowered from the model's {} to {} tokens: what the KV cache of {} blocks ({}) holds",
                 max_model_len, fitted, blocks, source);
    max_model_len = fitted;
  }
  resolved.num_blocks = static_cast<int>(blocks);
  resolved.max_model_len = max_model_len;
}

}  // namespace omni::engine
