// Qwen3-Omni (MoE): thinker (multimodal in, text out) -> talker (codec frames) -> code2wav
// (audio), streaming chunk by chunk. Checkpoints without audio output (Thinking, Captioner) run
// the thinker alone.
#include "config/pipeline_config.h"
#include "model/pipelines.h"

namespace omni::model {

namespace {

// The talker's codec end-of-speech token.
constexpr int kCodecEosToken = 2150;

bool has_audio_output(const Json& hf_config) {
  auto it = hf_config.find("enable_audio_output");
  return it == hf_config.end() || !it->is_boolean() || it->get<bool>();
}

config::StagePipelineConfig thinker_stage() {
  config::StagePipelineConfig thinker;
  thinker.stage_id = 0;
  thinker.model_stage = "thinker";
  thinker.execution_type = config::ExecutionType::kLlmAr;
  thinker.stage_model = "qwen3_omni_thinker";
  thinker.final_output = true;
  thinker.final_output_type = "text";
  thinker.owns_tokenizer = true;
  thinker.requires_multimodal_data = true;
  thinker.hf_config_name = "thinker_config";
  thinker.engine_output_type = "latent";
  thinker.sampling_constraints = {{"detokenize", true}};
  return thinker;
}

}  // namespace

void register_qwen3_omni_pipelines(config::PipelineRegistry& registry) {
  config::PipelineConfig pipeline;
  pipeline.model_type = "qwen3_omni_moe";
  pipeline.model_arch = "Qwen3OmniMoeForConditionalGeneration";
  pipeline.hf_architectures = {"Qwen3OmniMoeForConditionalGeneration"};
  pipeline.hf_config_predicate = has_audio_output;
  pipeline.default_deploy_config_name = "qwen3_omni_moe.yaml";

  config::StagePipelineConfig thinker = thinker_stage();
  thinker.produces_async_chunks = true;
  pipeline.stages.push_back(thinker);

  config::StagePipelineConfig talker;
  talker.stage_id = 1;
  talker.model_stage = "talker";
  talker.execution_type = config::ExecutionType::kLlmAr;
  talker.stage_model = "qwen3_omni_talker";
  talker.input_sources = {0};
  talker.hf_config_name = "talker_config";
  talker.engine_output_type = "latent";
  talker.produces_async_chunks = true;
  talker.sampling_constraints = {{"detokenize", false}, {"stop_token_ids", {kCodecEosToken}}};
  pipeline.stages.push_back(talker);

  config::StagePipelineConfig code2wav;
  code2wav.stage_id = 2;
  code2wav.model_stage = "code2wav";
  code2wav.execution_type = config::ExecutionType::kLlmGeneration;
  code2wav.stage_model = "qwen3_omni_code2wav";
  code2wav.input_sources = {1};
  code2wav.final_output = true;
  code2wav.final_output_type = "audio";
  code2wav.hf_config_name = "code2wav_config";
  code2wav.engine_output_type = "audio";
  code2wav.retains_state_across_chunks = true;
  code2wav.sampling_constraints = {{"detokenize", true}};
  pipeline.stages.push_back(code2wav);
  registry.add(std::move(pipeline));

  config::PipelineConfig thinker_only;
  thinker_only.model_type = "qwen3_omni_moe_thinker_only";
  thinker_only.model_arch = "Qwen3OmniMoeForConditionalGeneration";
  thinker_only.hf_model_type = "qwen3_omni_moe";
  thinker_only.hf_config_predicate = [](const Json& hf_config) { return !has_audio_output(hf_config); };
  thinker_only.default_deploy_config_name = "qwen3_omni_moe_thinker_only.yaml";
  thinker_only.stages.push_back(thinker_stage());
  registry.add(std::move(thinker_only));

  registry.add_known_model("Qwen/Qwen3-Omni-30B-A3B-Instruct", "qwen3_omni_moe");
  registry.add_known_model("Qwen/Qwen3-Omni-30B-A3B-Thinking", "qwen3_omni_moe_thinker_only");
  registry.add_known_model("Qwen/Qwen3-Omni-30B-A3B-Captioner", "qwen3_omni_moe_thinker_only");
}

}  // namespace omni::model
