// The one reader of a stage's engine args: the JSON object a stage runner is built from (the
// deploy YAML's engine_args merged with the CLI, plus "model", "runner", "stage_model" and
// "connector_extra" from pipeline_from_config.h). Every runner reads its arguments through this,
// so that a wrong argument gives the same kInvalidConfig message everywhere, naming the stage and
// the argument.
//
// An EngineArgs borrows the JSON (it must outlive the reader); it is a plain value otherwise.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.h"
#include "base/json.h"
#include "engine/engine_config.h"
#include "model/stage_model_registry.h"
#include "tensor/device.h"
#include "tensor/dtype.h"

namespace omni::runtime {

// object[key] converted to T; nullopt when the key is absent or null. A value that does not
// convert is handed to `wrong_type`, which throws the caller's omni::Error naming the field in
// the caller's words (should it return, the conversion's own exception propagates).
template <typename T, typename WrongType>
std::optional<T> optional_field(const Json& object, std::string_view key, WrongType&& wrong_type) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  try {
    return it->template get<T>();
  } catch (const Json::exception&) {
    wrong_type(*it);
    throw;
  }
}

class EngineArgs {
 public:
  // `args` must be a JSON object (validate_pipeline checks it); kInvalidConfig naming the stage
  // otherwise.
  EngineArgs(const Json& args, int stage_id);

  const Json& json() const { return args_; }
  int stage_id() const { return stage_id_; }

  // The argument `key`; nullopt when absent or null. kInvalidConfig "stage N: engine argument
  // <key> has the wrong type (<value>)" when it does not convert to T.
  template <typename T>
  std::optional<T> optional(std::string_view key) const {
    return optional_field<T>(args_, key, [&](const Json& value) { throw_wrong_type(key, value); });
  }
  template <typename T>
  T value_or(std::string_view key, T fallback) const {
    return optional<T>(key).value_or(std::move(fallback));
  }
  // An object-valued argument (e.g. connector_extra); nullptr when absent or null, kInvalidConfig
  // when it is not an object.
  const Json* object(std::string_view key) const;

  // "model" (required, non-empty): the checkpoint directory.
  std::filesystem::path model_dir() const;
  // "device" (default "auto": the stage process's first visible GPU, else the CPU; or "cpu",
  // "cuda", "cuda:N"), resolved with tensor::resolve_device. The stage process sees only its own
  // devices (CUDA_VISIBLE_DEVICES), so "cuda" is its first.
  tensor::Device device() const;
  // "dtype" (default "auto": nullopt), parsed with model::parse_model_dtype.
  std::optional<tensor::DType> dtype() const;
  // "load_format" (default "auto"): true for "dummy" (random weights, model::StageModelArgs),
  // false for "auto" and "safetensors"; kInvalidConfig naming the stage and the allowed values
  // otherwise.
  bool random_weights() const;
  // "tensor_parallel_size" (default 1); kInvalidConfig when below 1.
  int tensor_parallel_size() const;
  // "stage_model" (required): the registered stage model that implements the stage.
  std::string stage_model() const;
  // The autoregressive engine's settings from their vLLM names (max_num_seqs,
  // max_num_batched_tokens, enable_prefix_caching, enable_chunked_prefill,
  // num_gpu_blocks_override, kv_cache_memory_bytes, max_model_len, seed, enforce_eager,
  // async_scheduling, gpu_memory_utilization) over `defaults`.
  engine::EngineConfig engine_config(const engine::EngineConfig& defaults = {}) const;
  // What a stage model factory is built from: model_dir(), device(), dtype(), the stage id and the
  // engine args.
  model::StageModelArgs stage_model_args() const;

 private:
  [[noreturn]] void throw_wrong_type(std::string_view key, const Json& value) const;

  const Json& args_;
  int stage_id_;
};

}  // namespace omni::runtime
