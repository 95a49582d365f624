// Z-Image text-to-image: one diffusion stage that emits images. Served checkpoints are in the
// diffusers layout; model_index.json's _class_name ("ZImagePipeline") selects this pipeline.
#include "config/pipeline_config.h"
#include "model/pipelines.h"

namespace omni::model {

void register_z_image_pipelines(config::PipelineRegistry& registry) {
  config::PipelineConfig pipeline;
  pipeline.model_type = "z_image";
  pipeline.model_arch = "ZImagePipeline";
  pipeline.hf_architectures = {"ZImagePipeline"};
  pipeline.default_deploy_config_name = "z_image.yaml";

  config::StagePipelineConfig dit;
  dit.stage_id = 0;
  dit.model_stage = "dit";
  dit.execution_type = config::ExecutionType::kDiffusion;
  dit.stage_model = "z_image";
  dit.final_output = true;
  dit.final_output_type = "image";
  dit.engine_output_type = "image";
  pipeline.stages.push_back(dit);
  registry.add(std::move(pipeline));

  registry.add_known_model("Tongyi-MAI/Z-Image-Turbo", "z_image");
  registry.add_known_model("Tongyi-MAI/Z-Image", "z_image");
}

}  // namespace omni::model
