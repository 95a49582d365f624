#include "model/pipelines.h"

namespace omni::model {

void register_all_pipelines(config::PipelineRegistry& registry) {
  register_qwen3_pipelines(registry);
  register_qwen3_tts_pipelines(registry);
  register_qwen3_omni_pipelines(registry);
  register_qwen2_5_omni_pipelines(registry);
  register_z_image_pipelines(registry);
}

}  // namespace omni::model
