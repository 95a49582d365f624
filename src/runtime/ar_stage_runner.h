// The "ar" stage runner: an autoregressive stage (execution_type llm_ar) served by the engine's
// ArEngine over the stage's model, loaded from the model directory by its config.json
// architectures (model::builtin_model_registry()). The text of each output comes from the model's
// own tokenizer when the directory has one.
//
// engine_args read here (vLLM's names; absent or null = the engine's default):
//   model (required): the checkpoint directory
//   max_num_seqs, max_num_batched_tokens, enable_prefix_caching, enable_chunked_prefill,
//   kv_cache_memory_bytes, num_gpu_blocks_override, max_model_len, seed
//   tensor_parallel_size: the model is split over that many rank processes started by this stage
//   process (runtime/tensor_parallel_model.h); rank r uses the r-th device the stage sees
// Requests carry their sampling parameters already merged over the stage's
// default_sampling_params by the orchestrator (request_plan.h); generation_config.json's
// temperature/top_p/top_k are the base below them, as in vLLM.
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
