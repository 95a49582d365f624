// The "generation" stage runner: an llm_generation stage served by engine::GenerationEngine over
// the registered streaming decoder stage model that engine_args.stage_model names
// (model/stage_model_registry.h: StreamingDecoderStage). It adapts the stage protocol to the
// engine; what the payloads hold and how the decoder loads belong to the stage model.
//
// Input: async_chunk requests (input_open) get their payloads in add_input(), the last chunk
// marked `last`; a full-payload request (input_open false) brings all of them in
// StageRequest::inputs. Each payload becomes codes through the stage model's payload_codes().
// prompt_token_ids are ignored (the orchestrator's placeholder). The stage model's
// context_codes() of the request's additional_information (a voice clone's reference codes), of
// which the last ref_code_context_frames frames are kept (model/audio_chunking.h), are decoded
// first as left context, and their audio is not output.
// Output: StageOutput::audio (at the decoder's sample rate) per decoded chunk; finish_reason
// "stop" on the output after the last input chunk is decoded.
//
// engine_args read (runtime/engine_args.h): model (required), stage_model (required), device
// (default "auto"), where the decoder's weights and every stream's state live, dtype, and
// connector_extra: the `extra` of the connector on the stage's input edge, whose chunking options
// model/audio_chunking.h reads; a request's additional_information may set its first chunk.
//
// Threads: like every StageRunner, used by the stage worker's one thread.
#pragma once

#include <memory>
#include <string_view>

#include "runtime/stage_runner.h"

namespace omni::runtime {

inline constexpr std::string_view kGenerationRunnerKind = "generation";

// Loads the stage model; throws what its factory throws (kNotFound, kLoadFailed naming the file)
// and kInvalidConfig naming the stage and the engine argument or connector option at fault.
std::unique_ptr<StageRunner> make_generation_stage_runner(const Json& engine_args, const StageRunnerContext& context);

}  // namespace omni::runtime
