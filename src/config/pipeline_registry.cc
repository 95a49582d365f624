#include "config/pipeline_registry.h"

#include <fmt/format.h>

#include <system_error>

#include "base/error.h"

namespace omni::config {

namespace fs = std::filesystem;

void PipelineRegistry::add(PipelineConfig pipeline) {
  validate_pipeline(pipeline);
  if (pipelines_.contains(pipeline.model_type)) {
    throw_error(ErrorCode::kInvalidConfig, "pipeline '{}' is registered twice", pipeline.model_type);
  }
  std::string key = pipeline.model_type;
  pipelines_.emplace(std::move(key), std::move(pipeline));
}

void PipelineRegistry::add_known_model(std::string hf_id, std::string model_type) {
  known_models_[std::move(hf_id)] = std::move(model_type);
}

const PipelineConfig* PipelineRegistry::find(const std::string& model_type) const {
  auto it = pipelines_.find(model_type);
  return it == pipelines_.end() ? nullptr : &it->second;
}

const PipelineConfig& PipelineRegistry::get(const std::string& model_type) const {
  if (const PipelineConfig* pipeline = find(model_type)) return *pipeline;
  throw_error(ErrorCode::kNotFound, "pipeline '{}' is not registered; registered pipelines: {}", model_type,
              fmt::join(names(), ", "));
}

std::vector<std::string> PipelineRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, pipeline] : pipelines_) out.push_back(name);
  return out;
}

namespace {

bool predicate_accepts(const PipelineConfig& pipeline, const Json& hf_config) {
  return !pipeline.hf_config_predicate || pipeline.hf_config_predicate(hf_config);
}

const PipelineConfig* match_hf_config(const PipelineRegistry& registry, const Json& hf_config, std::string& reason) {
  if (hf_config.contains("model_type") && hf_config["model_type"].is_string()) {
    const std::string model_type = hf_config["model_type"];
    for (const std::string& name : registry.names()) {
      const PipelineConfig& pipeline = *registry.find(name);
      const std::string& serves = pipeline.hf_model_type.empty() ? pipeline.model_type : pipeline.hf_model_type;
      if (serves == model_type && predicate_accepts(pipeline, hf_config)) {
        reason = fmt::format("config.json model_type '{}'", model_type);
        return &pipeline;
      }
    }
  }
  if (hf_config.contains("architectures") && hf_config["architectures"].is_array()) {
    for (const Json& arch : hf_config["architectures"]) {
      if (!arch.is_string()) continue;
      for (const std::string& name : registry.names()) {
        const PipelineConfig& pipeline = *registry.find(name);
        for (const std::string& known : pipeline.hf_architectures) {
          if (known == arch.get<std::string>() && predicate_accepts(pipeline, hf_config)) {
            reason = fmt::format("config.json architecture '{}'", known);
            return &pipeline;
          }
        }
      }
    }
  }
  return nullptr;
}

const PipelineConfig* match_known_model(const PipelineRegistry& registry, const std::string& model,
                                        std::string& reason) {
  const auto& known = registry.known_models();
  if (auto it = known.find(model); it != known.end()) {
    reason = fmt::format("known model '{}'", model);
    return &registry.get(it->second);
  }
  // A local copy keeps the repository's name as its directory name (/models/Qwen3-0.6B).
  std::string base = fs::path(model).lexically_normal().filename().string();
  if (base.empty()) base = fs::path(model).lexically_normal().parent_path().filename().string();
  for (const auto& [hf_id, model_type] : known) {
    if (fs::path(hf_id).filename().string() == base) {
      reason = fmt::format("directory name '{}' (known model '{}')", base, hf_id);
      return &registry.get(model_type);
    }
  }
  return nullptr;
}

}  // namespace

PipelineResolution resolve_pipeline(const PipelineRegistry& registry, const std::string& model,
                                    const std::string& deploy_pipeline_key, const std::string& model_class_name) {
  PipelineResolution out;
  if (!deploy_pipeline_key.empty()) {
    out.pipeline = &registry.get(deploy_pipeline_key);
    out.reason = fmt::format("deploy config 'pipeline: {}'", deploy_pipeline_key);
    return out;
  }

  std::error_code ec;
  const fs::path config_json = fs::path(model) / "config.json";
  if (fs::is_regular_file(config_json, ec)) {
    Json hf_config = read_json_file(config_json);
    if (hf_config.is_object()) out.pipeline = match_hf_config(registry, hf_config, out.reason);
    if (out.pipeline) return out;
  }

  // A diffusers checkpoint: model_index.json's _class_name (or the caller's override) is the
  // architecture.
  const fs::path model_index = fs::path(model) / "model_index.json";
  if (!model_class_name.empty() || fs::is_regular_file(model_index, ec)) {
    std::string class_name = model_class_name;
    if (class_name.empty()) {
      const Json index = read_json_file(model_index);
      if (index.is_object() && index.contains("_class_name") && index["_class_name"].is_string()) {
        class_name = index["_class_name"].get<std::string>();
      }
    }
    for (const std::string& name : registry.names()) {
      const PipelineConfig& pipeline = *registry.find(name);
      for (const std::string& known : pipeline.hf_architectures) {
        if (known == class_name) {
          out.pipeline = &pipeline;
          out.reason = model_class_name.empty() ? fmt::format("model_index.json _class_name '{}'", class_name)
                                                : fmt::format("--model-class-name '{}'", class_name);
          return out;
        }
      }
    }
    if (!model_class_name.empty()) {
      throw_error(ErrorCode::kNotFound, "--model-class-name '{}' names no registered pipeline; registered: {}",
                  model_class_name, fmt::join(registry.names(), ", "));
    }
  }

  out.pipeline = match_known_model(registry, model, out.reason);
  if (out.pipeline) return out;

  throw_error(ErrorCode::kNotFound,
              "no pipeline for model '{}': it is not a directory whose config.json has a registered model_type or "
              "architecture, nor a known model id; set `pipeline:` in a --deploy-config YAML. Registered pipelines: {}",
              model, fmt::join(registry.names(), ", "));
}

}  // namespace omni::config
