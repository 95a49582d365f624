// Turns the config layer's effective configuration (pipeline + deploy YAML + CLI, merged) into
// the runtime's PipelineSpec. Each stage runs the stage model its pipeline names
// (config::StagePipelineConfig::stage_model, registered in model/stage_model_registry.h) on the
// runner of its execution type's engine: llm_ar on "ar" (ar_stage_runner.h), llm_generation on
// "generation" (generation_stage_runner.h). A stage model with a runner registered under its own
// name runs on that runner instead (one that does not run on its engine yet). The user never
// names a runner, and nothing here looks at architectures or model families.
// PipelineSpec::model_facts merges what each stage's model describes of the checkpoint.
#pragma once

#include <vector>

#include "config/effective_config.h"
#include "runtime/stage_spec.h"

namespace omni::runtime {

// Edges: a stage's input_connectors["from_stage_N"] names an entry of the config's connectors;
// when only the producer's output_connectors["to_stage_M"] is set, it names the edge's
// connector. Every engine argument travels (tensor_parallel_size sets the devices per replica),
// plus "model" (the checkpoint directory), "runner", "stage_model", and "connector_extra": the
// `extra` of the connectors on the stage's incoming edges, merged in source order (absent when
// empty), where a consuming decoder finds its chunking options (model/audio_chunking.h).
// A SharedMemoryConnector edge itself keeps only the options it reads (shm_threshold_bytes), as
// vLLM-Omni's connector `extra` also carries the stages' options.
// Throws omni::Error: kUnsupported naming the stage, its model_stage, execution type and stage
// model when that is not registered (or the pipeline names none); what a stage model's describe()
// throws for a malformed checkpoint; kInvalidConfig naming the stage and the
// connector when an edge names a connector the config does not define.
PipelineSpec pipeline_spec_from_config(const config::EffectiveConfig& config);

// The part of a pipeline omnistage can serve today. When some stage has no stage model yet but the
// stages before it already end in a final output (a text stage whose output is final, ahead of the
// speech stages that are not built), `config` keeps those stages alone (their output connectors
// to the dropped stages removed) and `left_out` lists the dropped ones in order;
// the served pipeline then produces only what the kept stages' final outputs are. Otherwise
// `config` is the given one whole and `left_out` is empty (pipeline_spec_from_config names a
// stage that cannot be served).
struct ServableStages {
  config::EffectiveConfig config;
  std::vector<const config::StagePipelineConfig*> left_out;
};
ServableStages servable_stages(const config::EffectiveConfig& config);

}  // namespace omni::runtime
