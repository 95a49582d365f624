// Qwen3-TTS: the talker emits one 16-codebook codec frame per step (stage 0) and streams the
// frames to code2wav, which decodes them to 24 kHz audio (stage 1).
#include "config/pipeline_config.h"
#include "model/pipelines.h"

namespace omni::model {

namespace {

// The talker's codec end-of-speech token.
constexpr int kCodecEosToken = 2150;

}  // namespace

void register_qwen3_tts_pipelines(config::PipelineRegistry& registry) {
  config::PipelineConfig pipeline;
  pipeline.model_type = "qwen3_tts";
  pipeline.model_arch = "Qwen3TTSForConditionalGeneration";
  pipeline.hf_architectures = {"Qwen3TTSForConditionalGeneration"};
  pipeline.default_deploy_config_name = "qwen3_tts.yaml";

  config::StagePipelineConfig talker;
  talker.stage_id = 0;
  talker.model_stage = "qwen3_tts";
  talker.execution_type = config::ExecutionType::kLlmAr;
  talker.stage_model = "qwen3_tts_talker";
  talker.owns_tokenizer = true;
  talker.engine_output_type = "latent";
  talker.produces_async_chunks = true;
  talker.sampling_constraints = {{"detokenize", false}, {"stop_token_ids", {kCodecEosToken}}};
  pipeline.stages.push_back(talker);

  config::StagePipelineConfig code2wav;
  code2wav.stage_id = 1;
  code2wav.model_stage = "code2wav";
  code2wav.execution_type = config::ExecutionType::kLlmGeneration;
  code2wav.stage_model = "qwen3_tts_code2wav";
  code2wav.input_sources = {0};
  code2wav.final_output = true;
  code2wav.final_output_type = "audio";
  code2wav.engine_output_type = "audio";
  code2wav.model_arch = "Qwen3TTSCode2Wav";
  code2wav.retains_state_across_chunks = true;
  pipeline.stages.push_back(code2wav);
  registry.add(std::move(pipeline));

  for (const char* size : {"0.6B", "1.7B"}) {
    for (const char* variant : {"Base", "CustomVoice", "VoiceDesign"}) {
      registry.add_known_model(std::string("Qwen/Qwen3-TTS-12Hz-") + size + "-" + variant, "qwen3_tts");
    }
  }
}

}  // namespace omni::model
