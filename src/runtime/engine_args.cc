#include "runtime/engine_args.h"

#include <fmt/format.h>

#include "model/model_dtype.h"
#include "tensor/backend.h"

namespace omni::runtime {

EngineArgs::EngineArgs(const Json& args, int stage_id) : args_(args), stage_id_(stage_id) {
  if (!args_.is_object()) {
    throw_error(ErrorCode::kInvalidConfig, "stage {}: engine_args must be a JSON object, not {}", stage_id_,
                args_.type_name());
  }
}

void EngineArgs::throw_wrong_type(std::string_view key, const Json& value) const {
  throw_error(ErrorCode::kInvalidConfig, "stage {}: engine argument {} has the wrong type ({})", stage_id_, key,
              value.dump());
}

const Json* EngineArgs::object(std::string_view key) const {
  auto it = args_.find(key);
  if (it == args_.end() || it->is_null()) return nullptr;
  if (!it->is_object()) {
    throw_error(ErrorCode::kInvalidConfig, "stage {} engine_args.{} must be an object, got {}", stage_id_, key,
                it->dump());
  }
  return &*it;
}

std::filesystem::path EngineArgs::model_dir() const {
  const std::optional<std::string> dir = optional<std::string>("model");
  if (!dir || dir->empty()) {
    throw_error(ErrorCode::kInvalidConfig, "stage {}: engine_args.model must name the checkpoint directory", stage_id_);
  }
  return *dir;
}

tensor::Device EngineArgs::device() const {
  return tensor::resolve_device(value_or<std::string>("device", "auto"),
                                fmt::format("stage {} engine argument device", stage_id_));
}

std::optional<tensor::DType> EngineArgs::dtype() const {
  return model::parse_model_dtype(value_or<std::string>("dtype", "auto"),
                                  fmt::format("stage {} engine argument dtype", stage_id_));
}

bool EngineArgs::random_weights() const {
  const std::string format = value_or<std::string>("load_format", "auto");
  if (format == "dummy") return true;
  if (format == "auto" || format == "safetensors") return false;
  throw_error(ErrorCode::kInvalidConfig, "stage {}: load_format '{}': allowed values are auto, safetensors, dummy",
              stage_id_, format);
}

int EngineArgs::tensor_parallel_size() const {
  const int size = value_or("tensor_parallel_size", 1);
  if (size < 1) {
    throw_error(ErrorCode::kInvalidConfig, "stage {}: tensor_parallel_size must be >= 1, got {}", stage_id_, size);
  }
  return size;
}

std::string EngineArgs::stage_model() const {
  std::optional<std::string> name = optional<std::string>("stage_model");
  if (!name || name->empty()) {
    throw_error(ErrorCode::kInvalidConfig, "stage {}: engine_args.stage_model must name a registered stage model",
                stage_id_);
  }
  return *name;
}

engine::EngineConfig EngineArgs::engine_config(const engine::EngineConfig& defaults) const {
  engine::EngineConfig config = defaults;
  config.max_num_seqs = value_or("max_num_seqs", config.max_num_seqs);
  config.max_num_batched_tokens = value_or("max_num_batched_tokens", config.max_num_batched_tokens);
  config.enable_prefix_caching = value_or("enable_prefix_caching", config.enable_prefix_caching);
  config.enable_chunked_prefill = value_or("enable_chunked_prefill", config.enable_chunked_prefill);
  config.num_gpu_blocks_override = value_or("num_gpu_blocks_override", config.num_gpu_blocks_override);
  if (auto bytes = optional<uint64_t>("kv_cache_memory_bytes"))
    config.kv_cache_memory_bytes = static_cast<size_t>(*bytes);
  config.max_model_len = value_or("max_model_len", config.max_model_len);
  config.seed = value_or("seed", config.seed);
  config.enforce_eager = value_or("enforce_eager", config.enforce_eager);
  config.async_scheduling = value_or("async_scheduling", config.async_scheduling);
  config.gpu_memory_utilization = value_or("gpu_memory_utilization", config.gpu_memory_utilization);
  return config;
}

model::StageModelArgs EngineArgs::stage_model_args() const {
  model::StageModelArgs out;
  out.model_dir = model_dir();
  out.device = device();
  out.dtype = dtype();
  out.stage_id = stage_id_;
  out.engine_args = args_;
  out.random_weights = random_weights();
  return out;
}

}  // namespace omni::runtime
