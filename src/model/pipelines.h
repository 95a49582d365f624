// Registration of every model family's pipelines (topologies) into a config::PipelineRegistry.
//
// Registration is explicit: cli/ calls register_all_pipelines once at start-up. There are no
// static initializers, because the linker drops unreferenced objects from static libraries.
#pragma once

#include "config/pipeline_registry.h"

namespace omni::model {

// One function per model family, defined in src/model/<family>/pipeline.cc.
void register_qwen3_pipelines(config::PipelineRegistry& registry);
void register_qwen3_tts_pipelines(config::PipelineRegistry& registry);
void register_qwen3_omni_pipelines(config::PipelineRegistry& registry);
void register_qwen2_5_omni_pipelines(config::PipelineRegistry& registry);
void register_z_image_pipelines(config::PipelineRegistry& registry);

// Registers every family's pipelines and known model ids. Throws omni::Error(kInvalidConfig) if
// a pipeline is invalid or registered twice (a bug, reported at start-up).
void register_all_pipelines(config::PipelineRegistry& registry);

}  // namespace omni::model
