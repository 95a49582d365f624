// Turns the config layer's effective configuration (pipeline + deploy YAML + CLI, merged) into
// the runtime's PipelineSpec, choosing each stage's runner from what the stage is: an
// autoregressive stage (execution_type llm_ar) whose architecture has a built-in causal-LM
// implementation (model::builtin_model_registry(), stage models that build their own inputs
// included) runs on the "ar" runner (ar_stage_runner.h); Qwen3-TTS's code2wav
// (Qwen3TTSCode2Wav, llm_generation) on "qwen3_tts_code2wav".
// The user never names a runner.
#pragma once

#include "config/effective_config.h"
#include "runtime/stage_spec.h"

namespace omni::runtime {

// Edges: a stage's input_connectors["from_stage_N"] names an entry of the config's connectors;
// when only the producer's output_connectors["to_stage_M"] is set, it names the edge's
// connector. Every engine argument travels (tensor_parallel_size sets the devices per replica),
// plus "model" (the checkpoint directory), "runner", and "connector_extra": the `extra` of the
// connectors on the stage's incoming edges, merged in source order (absent when empty), where a
// consumer such as code2wav finds codec_chunk_frames, initial_codec_chunk_frames and the like.
// A SharedMemoryConnector edge itself keeps only the options it reads (shm_threshold_bytes), as
// vLLM-Omni's connector `extra` also carries the stages' options.
// Throws omni::Error: kUnsupported naming the stage, its model_stage, execution type and
// architecture when no stage model exists for it; kInvalidConfig naming the stage and the
// connector when an edge names a connector the config does not define.
PipelineSpec pipeline_spec_from_config(const config::EffectiveConfig& config);

}  // namespace omni::runtime
