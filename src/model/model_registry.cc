#include "model/model_registry.h"

#include "base/error.h"
#include "model/qwen2/qwen2.h"
#include "model/qwen2_5_omni/thinker.h"
#include "model/qwen3/qwen3.h"
#include "model/qwen3_omni/thinker.h"
#include "model/qwen3_tts/talker_stage_model.h"

namespace omni::model {

void ModelRegistry::add_causal_lm(const std::string& architecture, CausalLmFactory factory) {
  if (!causal_lms_.emplace(architecture, std::move(factory)).second) {
    throw_error(ErrorCode::kInternal, "model registry: architecture '{}' registered twice", architecture);
  }
}

bool ModelRegistry::has_causal_lm(const std::string& architecture) const { return causal_lms_.count(architecture); }

std::vector<std::string> ModelRegistry::causal_lm_architectures() const {
  std::vector<std::string> names;
  for (const auto& [name, factory] : causal_lms_) names.push_back(name);
  return names;
}

std::unique_ptr<CausalLm> ModelRegistry::create_causal_lm(const std::filesystem::path& dir,
                                                          const CausalLmLoadOptions& options) const {
  if (!std::filesystem::is_directory(dir)) {
    throw_error(ErrorCode::kNotFound, "model folder {} does not exist", dir.string());
  }
  const auto path = dir / "config.json";
  const Json config = read_json_file(path);
  if (!config.contains("architectures") || !config["architectures"].is_array() || config["architectures"].empty() ||
      !config["architectures"][0].is_string()) {
    throw_error(ErrorCode::kLoadFailed, "{}: missing field 'architectures'", path.string());
  }
  const std::string arch = config["architectures"][0].get<std::string>();
  auto it = causal_lms_.find(arch);
  if (it == causal_lms_.end()) {
    std::string supported;
    for (const std::string& name : causal_lm_architectures()) supported += (supported.empty() ? "" : ", ") + name;
    throw_error(ErrorCode::kUnsupported, "{}: architecture '{}' is not supported (supported: {})", path.string(), arch,
                supported);
  }
  return it->second(dir, config, options);
}

void register_model_families(ModelRegistry& registry) {
  qwen2::register_family(registry);
  qwen3::register_family(registry);
  qwen3_omni::register_family(registry);
  // qwen2_5_omni::register_family joins with its stage models (model/stage_model_registry.cc).
  qwen3_tts::register_family(registry);
}

const ModelRegistry& builtin_model_registry() {
  static const ModelRegistry kRegistry = [] {
    ModelRegistry r;
    register_model_families(r);
    return r;
  }();
  return kRegistry;
}

}  // namespace omni::model
