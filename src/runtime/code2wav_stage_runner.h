// The "qwen3_tts_code2wav" stage runner: the Qwen3-TTS code2wav stage (execution_type
// llm_generation, model arch Qwen3TTSCode2Wav). It decodes the talker's codec frames
// (model/qwen3_tts/codec_frames.h payloads) into 24 kHz mono audio with the codec decoder of the
// checkpoint's speech_tokenizer/, streaming each request through engine::GenerationEngine.
//
// Input: async_chunk requests (input_open) get their frames in add_input() payloads, the last
// chunk marked `last`; a full-payload request (input_open false) brings all its frames in
// StageRequest::inputs. prompt_token_ids are ignored (the orchestrator's placeholder).
// Output: StageOutput::audio (audio_sample_rate 24000) per decoded chunk; finish_reason "stop"
// on the output after the last input chunk is decoded.
//
// Chunk sizes come from engine_args.connector_extra: the `extra` of the connector on the stage's
// input edge (the deploy YAML's connectors.<name>.extra, as vLLM-Omni reads them), which
// pipeline_from_config.h passes to the consuming stage:
//   initial_codec_chunk_frames (default 1): the first chunk, for a quick first packet; a request's
//     additional_information.initial_codec_chunk_frames overrides it (the speech API's field);
//   codec_chunk_frames (default 25): every later chunk;
//   codec_left_context_frames: accepted and unused; vLLM-Omni re-decodes that many earlier
//     frames per chunk because its decoder restarts, ours keeps each stream's state, so every
//     chunk is exact without re-decoding;
//   decode_batch_max_size (default 4, as the bundled deploy YAML): the most requests whose ready
//     chunks one decoder call takes (engine/generation_engine.h);
//   decode_cudagraph_batch_sizes: vLLM-Omni's captured batch buckets. The codec decoder runs
//     without CUDA graphs (a chunk's rows vary with its frames), so the largest bucket only bounds
//     the batch, as decode_batch_max_size does (the smaller of the two when both are given).
// engine_args read: model (required): the checkpoint directory (the decoder is model/speech_tokenizer);
// device (optional, default "auto": the stage's first visible GPU, else the CPU; tensor/backend.h's
// resolve_device), where the decoder's weights and every stream's state live; connector_extra
// (optional, above).
//
// Threads: like every StageRunner, used by the stage worker's one thread.
#pragma once

#include <memory>
#include <string_view>

#include "runtime/stage_runner.h"

namespace omni::runtime {

inline constexpr std::string_view kQwen3TtsCode2WavRunnerKind = "qwen3_tts_code2wav";

// Loads the codec decoder; throws what the loader throws (kNotFound, kLoadFailed naming the
// file) and kInvalidConfig naming the stage and the engine argument or connector option that is
// missing or has the wrong type.
std::unique_ptr<StageRunner> make_code2wav_stage_runner(const Json& engine_args, const StageRunnerContext& context);

}  // namespace omni::runtime
