// What `bench latency` and `bench throughput` share: the engine flags (vLLM's names), loading the
// model onto its device with an ArEngine in front, random prompts, and running the engine until
// every request finished while timing each step.
//
// Runs on the calling thread; errors are omni::Error from the loaders and the engine.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/ar_engine.h"
#include "model/causal_lm.h"
#include "tensor/device.h"

namespace omni::cli::bench {

struct OfflineEngineFlags {
  std::string model;
  std::string device = "auto";
  std::string dtype = "auto";
  double gpu_memory_utilization = 0.9;
  std::optional<int> num_gpu_blocks_override;
  std::optional<int> max_model_len;
  std::optional<int> max_num_batched_tokens;
  bool enable_prefix_caching = false;
  bool enforce_eager = false;
  bool async_scheduling = false;
  std::string load_format = "auto";
  uint64_t seed = 0;
};

// Declares --model, --device, --dtype, --gpu-memory-utilization, --num-gpu-blocks-override,
// --max-model-len, --max-num-batched-tokens, --enable-prefix-caching, --enforce-eager, --async-scheduling, --load-format and --seed on
// `app`.
void add_offline_engine_flags(CLI::App& app, OfflineEngineFlags& flags);

struct OfflineEngine {
  tensor::Device device;
  std::unique_ptr<model::CausalLm> model;
  std::unique_ptr<engine::ArEngine> engine;  // borrows *model
  double load_seconds = 0;
};

// Loads the checkpoint on the flags' device and builds an engine for batches of up to
// `max_num_seqs` sequences of up to `max_model_len` tokens and steps of up to
// `max_num_batched_tokens` tokens (the flags win when given). Prefix caching is off unless asked for, so that repeated
// prompts cost full prefills.
OfflineEngine load_offline_engine(const OfflineEngineFlags& flags, int max_num_seqs, int max_num_batched_tokens,
                                  int max_model_len);
// The same in two steps: the model alone (engine null), then its engine.
OfflineEngine load_offline_model(const OfflineEngineFlags& flags);
void start_offline_engine(OfflineEngine& loaded, const OfflineEngineFlags& flags, int max_num_seqs,
                          int max_num_batched_tokens, int max_model_len);

// `length` token ids drawn uniformly from [0, vocab_size).
std::vector<int32_t> random_prompt(std::mt19937_64& rng, int length, int vocab_size);

struct StepRecord {
  double seconds = 0;
  int num_seqs = 0;
  int num_tokens = 0;
  bool decode() const { return num_seqs == num_tokens; }  // one new token per sequence
};

struct EngineRun {
  std::vector<StepRecord> steps;
  double seconds = 0;
  int64_t output_tokens = 0;
};

// Steps the engine until no request is unfinished; a step's time includes reading its tokens back.
EngineRun run_until_done(engine::ArEngine& engine);

// Greedy sampling with exact output lengths: `max_tokens` tokens, EOS ignored.
engine::SamplingParams fixed_length_greedy(int max_tokens);

}  // namespace omni::cli::bench
