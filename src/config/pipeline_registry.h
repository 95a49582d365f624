// The registry of pipelines (vLLM-Omni's OMNI_PIPELINES) and the resolution of a model to one.
//
// Model families add their pipelines from C++ (model::register_all_pipelines); registration
// validates the topology. Build the registry once at start-up on one thread; afterwards it is
// only read and may be shared between threads.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "base/json.h"
#include "config/pipeline_config.h"

namespace omni::config {

class PipelineRegistry {
 public:
  // Validates `pipeline` (validate_pipeline) and adds it under its model_type. Throws
  // omni::Error(kInvalidConfig) when invalid or when the key is already registered.
  void add(PipelineConfig pipeline);

  // Records that the Hugging Face id `hf_id` (e.g. "Qwen/Qwen3-0.6B") is served by pipeline
  // `model_type`, so that a model can be resolved without its files on disk.
  void add_known_model(std::string hf_id, std::string model_type);

  // nullptr when `model_type` is not registered.
  const PipelineConfig* find(const std::string& model_type) const;
  // Like find, but throws omni::Error(kNotFound) naming the key and the registered pipelines.
  const PipelineConfig& get(const std::string& model_type) const;

  std::vector<std::string> names() const;  // sorted
  const std::map<std::string, std::string>& known_models() const { return known_models_; }

 private:
  std::map<std::string, PipelineConfig> pipelines_;
  std::map<std::string, std::string> known_models_;  // HF id -> model_type
};

// How a model argument was matched to a pipeline, for `omnistage config` and error messages.
struct PipelineResolution {
  const PipelineConfig* pipeline = nullptr;
  std::string reason;  // e.g. "config.json model_type 'qwen3'"
};

// Resolves `model` (a local directory or a Hugging Face id) to a registered pipeline, in order:
// `deploy_pipeline_key` (the deploy YAML's `pipeline:`, empty when not set); the model
// directory's config.json `model_type`, then its `architectures`; the table of known Hugging Face
// ids (also matched by the directory's base name). Throws omni::Error(kNotFound) naming the model
// and listing the registered pipelines when nothing matches; kLoadFailed for an unreadable
// config.json.
// A diffusers checkpoint (model_index.json) is matched by its _class_name against the pipelines'
// hf_architectures, after config.json and before the known ids; `model_class_name` (the
// --model-class-name flag, empty when not given) replaces the _class_name.
PipelineResolution resolve_pipeline(const PipelineRegistry& registry, const std::string& model,
                                    const std::string& deploy_pipeline_key, const std::string& model_class_name = "");

}  // namespace omni::config
