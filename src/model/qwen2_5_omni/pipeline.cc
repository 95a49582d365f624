// Qwen2.5-Omni: thinker (multimodal in, text out) -> talker (codec tokens) -> code2wav (DiT +
// BigVGAN token2wav, audio). There is no per-chunk producer: stages hand over whole outputs.
#include "config/pipeline_config.h"
#include "model/pipelines.h"

namespace omni::model {

namespace {

// The talker's codec end-of-speech token.
constexpr int kCodecEosToken = 8294;

}  // namespace

void register_qwen2_5_omni_pipelines(config::PipelineRegistry& registry) {
  config::PipelineConfig pipeline;
  pipeline.model_type = "qwen2_5_omni";
  pipeline.model_arch = "Qwen2_5OmniForConditionalGeneration";
  pipeline.hf_architectures = {"Qwen2_5OmniModel", "Qwen2_5OmniForConditionalGeneration"};
  pipeline.default_deploy_config_name = "qwen2_5_omni.yaml";

  config::StagePipelineConfig thinker;
  thinker.stage_id = 0;
  thinker.model_stage = "thinker";
  thinker.execution_type = config::ExecutionType::kLlmAr;
  thinker.stage_model = "qwen2_5_omni_thinker";
  thinker.final_output = true;
  thinker.final_output_type = "text";
  thinker.owns_tokenizer = true;
  thinker.requires_multimodal_data = true;
  thinker.hf_config_name = "thinker_config";
  thinker.engine_output_type = "latent";
  thinker.sampling_constraints = {{"detokenize", true}};
  pipeline.stages.push_back(thinker);

  config::StagePipelineConfig talker;
  talker.stage_id = 1;
  talker.model_stage = "talker";
  talker.execution_type = config::ExecutionType::kLlmAr;
  talker.stage_model = "qwen2_5_omni_talker";
  talker.input_sources = {0};
  talker.hf_config_name = "talker_config";
  talker.engine_output_type = "latent";
  talker.sampling_constraints = {{"detokenize", false}, {"stop_token_ids", {kCodecEosToken}}};
  pipeline.stages.push_back(talker);

  config::StagePipelineConfig code2wav;
  code2wav.stage_id = 2;
  code2wav.model_stage = "code2wav";
  code2wav.execution_type = config::ExecutionType::kLlmGeneration;
  code2wav.stage_model = "qwen2_5_omni_code2wav";
  code2wav.input_sources = {1};
  code2wav.final_output = true;
  code2wav.final_output_type = "audio";
  code2wav.hf_config_name = "token2wav_config";
  code2wav.engine_output_type = "audio";
  pipeline.stages.push_back(code2wav);
  registry.add(std::move(pipeline));

  registry.add_known_model("Qwen/Qwen2.5-Omni-7B", "qwen2_5_omni");
  registry.add_known_model("Qwen/Qwen2.5-Omni-3B", "qwen2_5_omni");
}

}  // namespace omni::model
