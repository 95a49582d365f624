// The "qwen3_tts_talker" stage runner: stage 0 of the qwen3_tts pipeline. For each request it
// builds the talker prompt (model/qwen3_tts/prompt.h) from the request's additional_information,
// then every step generates one codec frame for every running request in one batch: a talker
// step (prefill for new requests, one row for the others, built from the request's last frame and
// text track) samples codebook 0 on the host
// (repetition penalty over earlier code0s, min_tokens, suppression of the control ids except codec
// EOS, and of EOS too with ignore_eos), and the code predictor fills codebooks 1..15 in 15 batched
// steps with the sub-talker sampling parameters, drawn on the talker's device (Talker::
// predict_frames: no host synchronisation until the frame's codes come back in one copy).
// Each frame leaves as one StageOutput: token_ids = {code0}, payload = the frame in the
// codec_frames format; the request finishes with "stop" on codec EOS (no frame) or "length" at
// max_new_tokens frames.
//
// engine_args read here:
//   model (required): the checkpoint directory
//   device (default "auto": the stage process's first visible GPU, else the CPU; or "cpu",
//     "cuda:N")
//   max_num_seqs (default 64), max_model_len, num_gpu_blocks_override, kv_cache_memory_bytes, seed
//   gpu_memory_utilization (on a GPU, this stage's share of the device memory, the weights and
//     activations included; other stages on the same device keep their own shares), and
//     max_num_batched_tokens (sizes the activations the share leaves room for)
//   subtalker_sampling_params: {do_sample, temperature, top_k, top_p} over generation_config.json's
//     subtalker_* (do_sample false = greedy)
//   tts_max_instructions_length (default 500 characters)
//   code_predictor_frame_steps (default true; false turns them off): on a GPU, the code predictor
//     as fixed-size frame steps per batch size (engine::decode_batch_sizes(max_num_seqs)), each one
//     CUDA graph (Talker::prepare_frame_steps); enforce_eager (default false) runs those steps
//     without graphs. On the CPU the ordinary path runs either way.
//   talker_decode_steps (default true; false turns them off): on a GPU, the talker's steps without
//     a prompt in them as fixed-size steps per batch size, each one CUDA graph that builds the
//     input rows from the last frames' codes on the device (Talker::prepare_decode_steps);
//     enforce_eager runs them without graphs. Steps with a prompt in them, and every step on the
//     CPU, build the rows on the host.
// Request fields: sampling_params (vLLM names; temperature, top_k, top_p, repetition_penalty,
// min_tokens, max_tokens, seed, ignore_eos) over generation_config.json's defaults; additional_information:
// text (required), voice, language, instructions, task_type, max_new_tokens (over max_tokens),
// seed (over sampling_params.seed), speaker_embedding (Base: the x-vector, an array of floats),
// non_streaming_mode (the prompt's text layout, model/qwen3_tts/prompt.h).
//
// KV blocks for a request's whole prompt + max_new_tokens are reserved when it starts, so a
// running request never waits for memory; requests wait (in order) until blocks are free.
// take_step_timings() gives each step's "talker" and "code_predictor" time; every few seconds the
// log gets their means and the mean batch.
// Threads: like every StageRunner, used by the stage worker's one thread.
#pragma once

#include <memory>
#include <string_view>

#include "runtime/stage_runner.h"

namespace omni::runtime {

inline constexpr std::string_view kQwen3TtsTalkerRunnerKind = "qwen3_tts_talker";

// Loads the talker, its tokenizer and the KV caches; throws what the loaders throw (kNotFound,
// kLoadFailed) and kInvalidConfig naming the stage and the engine argument at fault.
std::unique_ptr<StageRunner> make_qwen3_tts_talker_runner(const Json& engine_args, const StageRunnerContext& context);

}  // namespace omni::runtime
