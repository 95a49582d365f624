// Turns the config layer's effective configuration (pipeline + deploy YAML + CLI, merged) into
// the runtime's PipelineSpec, choosing each stage's runner from what the stage is: an
// autoregressive stage (execution_type llm_ar) whose architecture has a built-in causal-LM
// implementation runs on the "ar" runner (ar_stage_runner.h). The user never names a runner.
#pragma once

#include "config/effective_config.h"
#include "runtime/stage_spec.h"

namespace omni::runtime {

// Edges: a stage's input_connectors["from_stage_N"] names an entry of the config's connectors;
// when only the producer's output_connectors["to_stage_M"] is set, it names the edge's
// connector. Every engine argument travels (tensor_parallel_size sets the devices per replica),
// plus "model" (the checkpoint directory) and "runner".
// Throws omni::Error: kUnsupported naming the stage, its model_stage, execution type and
// architecture when no stage model exists for it; kInvalidConfig naming the stage and the
// connector when an edge names a connector the config does not define.
PipelineSpec pipeline_spec_from_config(const config::EffectiveConfig& config);

}  // namespace omni::runtime
