// A model's fixed stage topology: PipelineConfig and its StagePipelineConfig entries.
//
// Topology is code, not data: a model family builds its PipelineConfigs in C++ and registers
// them in a PipelineRegistry (config/pipeline_registry.h). Deploy YAML never sets these fields;
// it only sizes and places the stages. A PipelineConfig is immutable once registered and may be
// read from any thread.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"

namespace omni::config {

// How a stage runs (vLLM-Omni's StageExecutionType).
enum class ExecutionType {
  kLlmAr,          // autoregressive engine with a paged KV cache (thinker, talker)
  kLlmGeneration,  // one-shot non-autoregressive decoder on the engine (code2wav, vocoders)
  kDiffusion,      // diffusion engine (DiT stages)
};

// "llm_ar", "llm_generation", "diffusion".
std::string_view execution_type_name(ExecutionType type);

// Turns the finished outputs of the upstream stages into this stage's request (vLLM-Omni's
// custom_process_input_func / sync_process_input_func). Runs on the orchestrator thread.
// `upstream_outputs` holds one object per input source in input_sources order; `prompt` is the
// client's original request. Returns the request for this stage. Throws omni::Error for an
// upstream output it cannot use (that request fails, not the stage).
using StageInputAdapter =
    std::function<Json(const Json& upstream_outputs, const Json& prompt, bool requires_multimodal_data)>;

struct StagePipelineConfig {
  int stage_id = 0;
  std::string model_stage;  // sub-module of the model this stage runs: thinker, talker, code2wav…
  // The stage model that implements the stage, by the name its family registered it under for the
  // stage's execution type (model/stage_model_registry.h), e.g. "causal_lm". A pipeline may name one
  // that no family registers yet: it is then valid, and serving it stops naming the stage.
  std::string stage_model;
  ExecutionType execution_type = ExecutionType::kLlmAr;
  std::vector<int> input_sources;  // upstream stage ids; empty for an entry stage
  bool final_output = false;       // emits client-visible output
  std::string final_output_type;   // text, audio, image, video; empty when not final
  bool owns_tokenizer = false;     // its tokenizer is the pipeline's tokenizer
  bool requires_multimodal_data = false;
  std::string hf_config_name;      // sub-config of config.json (thinker_config…); empty = whole
  std::string engine_output_type;  // latent, text, audio…; empty = engine default
  std::string model_arch;          // per-stage architecture override; empty = pipeline's
  bool retains_state_across_chunks = false;
  // Sampling keys forced over the deploy defaults (stop_token_ids is unioned, caller first).
  Json sampling_constraints = Json::object();
  // Merged into the stage's extras (e.g. tts_args).
  Json extras = Json::object();
  // Whether the stage has a per-chunk producer for async_chunk streaming to its consumers
  // (vLLM-Omni: async_chunk_process_next_stage_input_func is set). Declared here because the
  // deploy merge must know it before any stage model exists.
  bool produces_async_chunks = false;
  // Consumer-side adapters. Empty means the orchestrator forwards the upstream request as is.
  StageInputAdapter process_input;       // used with async_chunk, and in sync mode when no sync one
  StageInputAdapter sync_process_input;  // used instead of process_input when async_chunk is off
};

struct PipelineConfig {
  std::string model_type;  // registry key, e.g. qwen3_omni_moe
  std::string model_arch;  // default architecture of every stage
  std::vector<StagePipelineConfig> stages;
  // The config.json `model_type` this pipeline serves; empty means the same as model_type.
  // Variants of one checkpoint family share it and tell themselves apart by hf_config_predicate.
  std::string hf_model_type;
  // config.json `architectures` entries that select this pipeline when model_type does not.
  std::vector<std::string> hf_architectures;
  // A second check on the parsed config.json (e.g. enable_audio_output); empty accepts any.
  std::function<bool(const Json& hf_config)> hf_config_predicate;
  // Bundled deploy YAML (file name in the deploy directory) used when no --deploy-config is given.
  std::string default_deploy_config_name;
  // API routes this pipeline does not serve (e.g. /v1/chat/completions for a TTS-only model).
  std::vector<std::string> endpoint_restrictions;

  const StagePipelineConfig* find_stage(int stage_id) const;
};

// Checks the topology rules: at least one stage, unique stage ids, every input source names a
// stage, no stage reads from itself, at least one entry stage (no inputs) and one terminal stage
// (final_output). Throws omni::Error(kInvalidConfig) listing every problem found, not just the
// first.
void validate_pipeline(const PipelineConfig& pipeline);

}  // namespace omni::config
