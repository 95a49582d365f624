#include "model/stage_model_registry.h"

#include <fmt/ranges.h>

#include "model/model_registry.h"

namespace omni::model {

namespace {

template <typename T>
std::unique_ptr<T> create(const StageModelRegistry<T>& registry, config::ExecutionType type, std::string_view name,
                          const StageModelArgs& args) {
  const typename StageModelRegistry<T>::Entry* entry = registry.find(name);
  if (entry == nullptr) {
    throw_error(ErrorCode::kInvalidConfig, "stage {}: no {} stage model '{}' is registered (registered: {})",
                args.stage_id, config::execution_type_name(type), name, fmt::join(registry.names(), ", "));
  }
  return entry->create(args);
}

template <typename T>
ModelFacts describe_entry(const StageModelRegistry<T>& registry, std::string_view name,
                          const std::filesystem::path& model_dir) {
  const typename StageModelRegistry<T>::Entry* entry = registry.find(name);
  if (entry == nullptr) throw_error(ErrorCode::kInternal, "stage model '{}' is not registered", name);
  return entry->describe ? entry->describe(model_dir) : ModelFacts{};
}

}  // namespace

bool StageModels::has(config::ExecutionType type, std::string_view name) const {
  switch (type) {
    case config::ExecutionType::kLlmAr:
      return ar.find(name) != nullptr;
    case config::ExecutionType::kLlmGeneration:
      return generation.find(name) != nullptr;
    case config::ExecutionType::kDiffusion:
      return diffusion.find(name) != nullptr;
  }
  return false;
}

std::vector<std::string> StageModels::names(config::ExecutionType type) const {
  switch (type) {
    case config::ExecutionType::kLlmAr:
      return ar.names();
    case config::ExecutionType::kLlmGeneration:
      return generation.names();
    case config::ExecutionType::kDiffusion:
      return diffusion.names();
  }
  return {};
}

ModelFacts StageModels::describe(config::ExecutionType type, std::string_view name,
                                 const std::filesystem::path& model_dir) const {
  switch (type) {
    case config::ExecutionType::kLlmAr:
      return describe_entry(ar, name, model_dir);
    case config::ExecutionType::kLlmGeneration:
      return describe_entry(generation, name, model_dir);
    case config::ExecutionType::kDiffusion:
      return describe_entry(diffusion, name, model_dir);
  }
  throw_error(ErrorCode::kInternal, "stage model '{}': no {} stage models exist", name,
              config::execution_type_name(type));
}

std::unique_ptr<ArStageModel> StageModels::create_ar(std::string_view name, const StageModelArgs& args) const {
  return create(ar, config::ExecutionType::kLlmAr, name, args);
}

std::unique_ptr<StreamingDecoderStage> StageModels::create_generation(std::string_view name,
                                                                      const StageModelArgs& args) const {
  return create(generation, config::ExecutionType::kLlmGeneration, name, args);
}

std::unique_ptr<DiffusionModel> StageModels::create_diffusion(std::string_view name, const StageModelArgs& args) const {
  return create(diffusion, config::ExecutionType::kDiffusion, name, args);
}

void require_checkpoint_weights(const StageModelArgs& args, std::string_view stage_model) {
  if (!args.random_weights) return;
  throw_error(ErrorCode::kUnsupported,
              "stage {}: load_format dummy (random weights) is not implemented for stage model {}; it loads the "
              "checkpoint's safetensors (load_format auto)",
              args.stage_id, stage_model);
}

void register_causal_lm_stage_models(StageModels& models) {
  models.ar.add("causal_lm", [](const StageModelArgs& args) {
    return builtin_model_registry().create_causal_lm(
        args.model_dir, {.device = args.device, .dtype = args.dtype, .random_weights = args.random_weights});
  });
}

void register_all_stage_models(StageModels& models) {
  register_causal_lm_stage_models(models);
  register_qwen3_tts_stage_models(models);
  register_qwen3_omni_stage_models(models);
  // Qwen2.5-Omni's thinker and talker stage models (register_qwen2_5_omni_stage_models) join once
  // its code2wav stage and the thinker's towers are wired in: until then its pipeline cannot serve.
  register_z_image_stage_models(models);
}

const StageModels& builtin_stage_models() {
  static const StageModels kModels = [] {
    StageModels models;
    register_all_stage_models(models);
    return models;
  }();
  return kModels;
}

}  // namespace omni::model
