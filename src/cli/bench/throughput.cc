#include "cli/bench/throughput.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "base/error.h"
#include "base/json.h"
#include "cli/bench/offline_engine.h"
#include "tensor/device.h"

namespace omni::cli::bench {

namespace {

struct ThroughputFlags {
  OfflineEngineFlags engine;
  int num_prompts = 1000;
  int input_len = 128;
  int output_len = 128;
  int max_num_seqs = 256;
  // The measured requests' sampling (the warm-up is greedy): 0 is greedy; otherwise request i is
  // seeded with i, so a run is repeatable.
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;
  std::string output_json;
};

int run_throughput(const ThroughputFlags& flags) {
  if (flags.num_prompts < 1 || flags.input_len < 1 || flags.output_len < 1 || flags.max_num_seqs < 1) {
    throw_error(ErrorCode::kInvalidArgument,
                "--num-prompts, --input-len, --output-len and --max-num-seqs must be >= 1 (got {}, {}, {}, {})",
                flags.num_prompts, flags.input_len, flags.output_len, flags.max_num_seqs);
  }
  // vLLM's default step budget for chunked prefill, or one full prompt batch if that is smaller.
  const int step_tokens = std::max(flags.max_num_seqs, std::min(8192, flags.max_num_seqs * flags.input_len));
  OfflineEngine loaded =
      load_offline_engine(flags.engine, flags.max_num_seqs, step_tokens, flags.input_len + flags.output_len);
  const int vocab = loaded.model->info().vocab_size;
  std::mt19937_64 rng(flags.engine.seed);

  // A short untimed round at full width, so that device memory, matrix plans and kernels are warm.
  for (int i = 0; i < flags.max_num_seqs; ++i) {
    loaded.engine->add_request({"warmup-" + std::to_string(i), random_prompt(rng, flags.input_len, vocab),
                                fixed_length_greedy(std::min(flags.output_len, 4)), Json()});
  }
  run_until_done(*loaded.engine);

  engine::SamplingParams sampling = fixed_length_greedy(flags.output_len);
  sampling.temperature = flags.temperature;
  sampling.top_p = flags.top_p;
  sampling.top_k = flags.top_k;
  for (int i = 0; i < flags.num_prompts; ++i) {
    sampling.seed = i;
    loaded.engine->add_request({std::to_string(i), random_prompt(rng, flags.input_len, vocab), sampling, Json()});
  }
  const EngineRun run = run_until_done(*loaded.engine);
  const double total_tokens =
      static_cast<double>(flags.num_prompts) * flags.input_len + static_cast<double>(run.output_tokens);
  const double requests_per_s = flags.num_prompts / run.seconds;
  const double output_per_s = static_cast<double>(run.output_tokens) / run.seconds;
  std::printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n", requests_per_s,
              total_tokens / run.seconds, output_per_s);
  std::printf("Total num prompt tokens:  %lld\nTotal num output tokens:  %lld\nElapsed: %.3f s in %zu steps\n",
              static_cast<long long>(flags.num_prompts) * flags.input_len, static_cast<long long>(run.output_tokens),
              run.seconds, run.steps.size());
  if (!flags.output_json.empty()) {
    std::ofstream out(flags.output_json);
    if (!out) throw_error(ErrorCode::kInvalidArgument, "--output-json {}: cannot write the file", flags.output_json);
    Json report = {{"model", flags.engine.model},
                   {"device", tensor::device_name(loaded.device)},
                   {"num_prompts", flags.num_prompts},
                   {"input_len", flags.input_len},
                   {"output_len", flags.output_len},
                   {"max_num_seqs", flags.max_num_seqs},
                   {"temperature", flags.temperature},
                   {"top_p", flags.top_p},
                   {"top_k", flags.top_k},
                   {"elapsed_time", run.seconds},
                   {"num_steps", run.steps.size()},
                   {"num_requests", flags.num_prompts},
                   {"total_num_tokens", total_tokens},
                   {"requests_per_second", requests_per_s},
                   {"tokens_per_second", total_tokens / run.seconds},
                   {"output_tokens_per_second", output_per_s}};
    out << report.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

std::function<int()> add_throughput_command(CLI::App& bench, CLI::App** sub) {
  auto flags = std::make_shared<ThroughputFlags>();
  CLI::App* throughput = bench.add_subcommand(
      "throughput",
      "Run N fixed-length requests offline through the engine in this process and report requests/s and "
      "tokens/s (the counterpart of `vllm bench throughput`)");
  add_offline_engine_flags(*throughput, flags->engine);
  throughput->add_option("--num-prompts", flags->num_prompts, "Requests")->capture_default_str();
  throughput->add_option("--input-len", flags->input_len, "Prompt tokens per request")->capture_default_str();
  throughput->add_option("--output-len", flags->output_len, "Generated tokens per request")->capture_default_str();
  throughput->add_option("--max-num-seqs", flags->max_num_seqs, "Most sequences per engine step")
      ->capture_default_str();
  throughput->add_option("--temperature", flags->temperature, "Sampling temperature of the requests; 0 is greedy")
      ->capture_default_str();
  throughput->add_option("--top-p", flags->top_p, "Nucleus sampling mass of the requests")->capture_default_str();
  throughput->add_option("--top-k", flags->top_k, "Sample among the k most likely tokens; 0: all")
      ->capture_default_str();
  throughput->add_option("--output-json", flags->output_json, "Write the results as JSON to this file");
  *sub = throughput;
  return [flags] { return run_throughput(*flags); };
}

}  // namespace omni::cli::bench
