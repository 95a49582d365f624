#include "cli/bench/offline_engine.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "model/model_dtype.h"
#include "model/model_registry.h"
#include "tensor/backend.h"

namespace omni::cli::bench {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void add_offline_engine_flags(CLI::App& app, OfflineEngineFlags& flags) {
  app.add_option("--model", flags.model, "Hugging Face model folder (config.json, *.safetensors)")->required();
  app.add_option("--device", flags.device, "auto (cuda when a GPU is visible, else cpu), cpu, cuda or cuda:N")
      ->capture_default_str();
  app.add_option("--dtype", flags.dtype,
                 "Weights, activations and KV cache: auto (the checkpoint's; bfloat16 for float32 ones on CUDA), "
                 "bfloat16, float16 (half) or float32 (float); the CPU computes in float32")
      ->capture_default_str();
  app.add_option("--gpu-memory-utilization", flags.gpu_memory_utilization,
                 "Fraction of the GPU's memory for weights, activations and the KV cache")
      ->capture_default_str();
  app.add_option("--num-gpu-blocks-override", flags.num_gpu_blocks_override,
                 "Use exactly this many KV cache blocks of 16 tokens");
  app.add_option("--max-model-len", flags.max_model_len,
                 "Longest sequence (default: input plus output length of the benchmark)");
  app.add_option("--max-num-batched-tokens", flags.max_num_batched_tokens,
                 "Most tokens per engine step (default: a whole batch of prompts in one step)");
  app.add_flag("--enable-prefix-caching", flags.enable_prefix_caching,
               "Reuse KV blocks of repeated prompt prefixes (default: off, every prompt is prefilled)");
  app.add_flag("--enforce-eager", flags.enforce_eager, "No CUDA graphs: launch the ops of each decode step one by one");
  app.add_flag("--async-scheduling", flags.async_scheduling,
               "Schedule the next step while the current one runs on the device (same output)");
  app.add_option("--load-format", flags.load_format,
                 "auto (the folder's safetensors) or dummy (random weights made on the device from config.json, "
                 "for shapes too large to store)")
      ->check(CLI::IsMember({"auto", "dummy"}))
      ->capture_default_str();
  app.add_option("--seed", flags.seed, "Seed of the random prompts")->capture_default_str();
}

OfflineEngine load_offline_engine(const OfflineEngineFlags& flags, int max_num_seqs, int max_num_batched_tokens,
                                  int max_model_len) {
  OfflineEngine out = load_offline_model(flags);
  start_offline_engine(out, flags, max_num_seqs, max_num_batched_tokens, max_model_len);
  return out;
}

OfflineEngine load_offline_model(const OfflineEngineFlags& flags) {
  OfflineEngine out;
  out.device = tensor::resolve_device(flags.device, "--device");
  const std::optional<tensor::DType> dtype = model::parse_model_dtype(flags.dtype, "--dtype");
  const auto start = std::chrono::steady_clock::now();
  out.model = model::builtin_model_registry().create_causal_lm(
      flags.model, {.device = out.device, .dtype = dtype, .random_weights = flags.load_format == "dummy"});
  out.load_seconds = seconds_since(start);
  spdlog::info("loaded {} on {} in {:.2f} s", flags.model, tensor::device_name(out.device), out.load_seconds);
  return out;
}

void start_offline_engine(OfflineEngine& out, const OfflineEngineFlags& flags, int max_num_seqs,
                          int max_num_batched_tokens, int max_model_len) {
  engine::EngineConfig config;
  config.max_num_seqs = max_num_seqs;
  config.max_num_batched_tokens = flags.max_num_batched_tokens.value_or(max_num_batched_tokens);
  config.num_gpu_blocks_override = flags.num_gpu_blocks_override.value_or(0);
  config.max_model_len = flags.max_model_len.value_or(max_model_len);
  config.gpu_memory_utilization = flags.gpu_memory_utilization;
  config.enable_prefix_caching = flags.enable_prefix_caching;
  config.seed = flags.seed;
  config.enforce_eager = flags.enforce_eager;
  config.async_scheduling = flags.async_scheduling;
  out.engine = std::make_unique<engine::ArEngine>(*out.model, config);
}

std::vector<int32_t> random_prompt(std::mt19937_64& rng, int length, int vocab_size) {
  std::uniform_int_distribution<int32_t> token(0, vocab_size - 1);
  std::vector<int32_t> ids(static_cast<size_t>(length));
  for (int32_t& id : ids) id = token(rng);
  return ids;
}

EngineRun run_until_done(engine::ArEngine& engine) {
  EngineRun run;
  const auto start = std::chrono::steady_clock::now();
  while (engine.has_unfinished_requests()) {
    const auto step_start = std::chrono::steady_clock::now();
    for (const engine::RequestOutput& out : engine.step()) {
      for (const engine::CompletionOutput& completion : out.completions) {
        run.output_tokens += static_cast<int64_t>(completion.token_ids.size());
      }
    }
    const engine::EngineStats stats = engine.stats();
    run.steps.push_back({seconds_since(step_start), stats.last_step_num_seqs, stats.last_step_num_tokens});
  }
  run.seconds = seconds_since(start);
  return run;
}

engine::SamplingParams fixed_length_greedy(int max_tokens) {
  engine::SamplingParams params;
  params.temperature = 0.0f;
  params.ignore_eos = true;
  params.max_tokens = max_tokens;
  return params;
}

}  // namespace omni::cli::bench
