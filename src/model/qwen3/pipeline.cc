// Qwen3 dense text models: one autoregressive stage that emits text.
#include "config/pipeline_config.h"
#include "model/pipelines.h"

namespace omni::model {

void register_qwen3_pipelines(config::PipelineRegistry& registry) {
  config::PipelineConfig pipeline;
  pipeline.model_type = "qwen3";
  pipeline.model_arch = "Qwen3ForCausalLM";
  pipeline.hf_architectures = {"Qwen3ForCausalLM"};
  pipeline.default_deploy_config_name = "qwen3.yaml";

  config::StagePipelineConfig llm;
  llm.stage_id = 0;
  llm.model_stage = "llm";
  llm.execution_type = config::ExecutionType::kLlmAr;
  llm.stage_model = "causal_lm";
  llm.final_output = true;
  llm.final_output_type = "text";
  llm.owns_tokenizer = true;
  llm.engine_output_type = "text";
  llm.sampling_constraints = {{"detokenize", true}};
  pipeline.stages.push_back(llm);
  registry.add(std::move(pipeline));

  for (const char* size : {"0.6B", "1.7B", "4B", "8B", "14B", "32B"}) {
    registry.add_known_model(std::string("Qwen/Qwen3-") + size, "qwen3");
    registry.add_known_model(std::string("Qwen/Qwen3-") + size + "-Base", "qwen3");
  }
}

}  // namespace omni::model
