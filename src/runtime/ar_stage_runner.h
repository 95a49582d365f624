// The "ar" stage runner: an autoregressive stage (execution_type llm_ar) served by the engine's
// ArEngine over the stage's model, loaded from the model directory by its config.json
// architectures (model::builtin_model_registry()). A text LM is fed the request's prompt token ids
// and its outputs' text comes from the model's own tokenizer when the directory has one. A model
// that builds its own input rows (model/embedding_input_lm.h) starts each request from its
// additional_information; its per-step outputs leave as the outputs' payloads, each output
// carrying the tokens whose step produced one (a stop token produces none), and its step parts
// (take_step_timings) are the model's. Such a model may read its upstream stage's payloads: those
// of the request (full payload) or, with async_chunk, each chunk as it comes (add_input). A text LM
// whose model gives rows to a downstream stage (CausalLm::downstream_layer) sends them, for a
// request that a later stage reads, as its outputs' payloads, one per token.
//
// engine_args read here (vLLM's names; absent or null = the engine's default), through EngineArgs
// (engine_args.h), plus whatever the model reads from them:
//   model (required): the checkpoint directory; device ("auto"), dtype ("auto")
//   max_num_seqs, max_num_batched_tokens, enable_prefix_caching, enable_chunked_prefill,
//   kv_cache_memory_bytes, num_gpu_blocks_override, max_model_len, seed, enforce_eager,
//   async_scheduling, gpu_memory_utilization (for a model that builds its inputs, on a GPU: this
//   stage's share of the device, measured from before it loaded anything)
//   tensor_parallel_size: the model is split over that many rank processes started by this stage
//   process (runtime/tensor_parallel_model.h); rank r uses the r-th device the stage sees
// Requests carry their sampling parameters already merged over the stage's
// default_sampling_params by the orchestrator (request_plan.h); below them are the model's own
// sampling defaults (generation_config.json's temperature/top_p/top_k for a text LM, as in vLLM).
//
// Threads: like every StageRunner, used by the stage worker's one thread.
#pragma once

#include <memory>
#include <string_view>

#include "runtime/stage_runner.h"

namespace omni::runtime {

inline constexpr std::string_view kArRunnerKind = "ar";

// Loads the model, tokenizer and engine; throws what the loaders throw (kNotFound, kLoadFailed)
// and kInvalidConfig naming the stage and the engine argument that has the wrong type.
std::unique_ptr<StageRunner> make_ar_stage_runner(const Json& engine_args, const StageRunnerContext& context);

}  // namespace omni::runtime
