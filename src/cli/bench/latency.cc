#include "cli/bench/latency.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "cli/bench/offline_engine.h"
#include "cli/bench/report.h"
#include "tensor/device.h"

namespace omni::cli::bench {

namespace {

struct LatencyFlags {
  OfflineEngineFlags engine;
  int input_len = 32;
  int output_len = 128;
  std::string batch_sizes = "8";
  int num_iters_warmup = 1;
  int num_iters = 3;
  std::string output_json;
};

std::vector<int> parse_batch_sizes(const std::string& text) {
  std::vector<int> sizes;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    int value = 0;
    size_t used = 0;
    try {
      value = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || value < 1) {
      throw_error(ErrorCode::kInvalidArgument, "--batch-size: '{}' is not a positive integer (e.g. 1,8,32)", item);
    }
    sizes.push_back(value);
  }
  if (sizes.empty()) throw_error(ErrorCode::kInvalidArgument, "--batch-size: no batch size given");
  return sizes;
}

double mean(const std::vector<double>& values) {
  return values.empty() ? 0.0 : std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

// One batch through the engine: every prompt is added before the first step.
EngineRun run_batch(engine::ArEngine& engine, std::mt19937_64& rng, int batch, int input_len, int output_len,
                    int vocab) {
  for (int i = 0; i < batch; ++i) {
    engine.add_request(
        {std::to_string(i), random_prompt(rng, input_len, vocab), fixed_length_greedy(output_len), Json()});
  }
  return run_until_done(engine);
}

int run_latency(const LatencyFlags& flags) {
  if (flags.input_len < 1 || flags.output_len < 2) {
    throw_error(ErrorCode::kInvalidArgument, "--input-len must be >= 1 and --output-len >= 2 (got {} and {})",
                flags.input_len, flags.output_len);
  }
  if (flags.num_iters < 1 || flags.num_iters_warmup < 0) {
    throw_error(ErrorCode::kInvalidArgument, "--num-iters must be >= 1 and --num-iters-warmup >= 0");
  }
  const std::vector<int> sizes = parse_batch_sizes(flags.batch_sizes);
  const int largest = *std::max_element(sizes.begin(), sizes.end());
  // A whole batch of prompts fits one step, so the first step is the batch's prefill.
  OfflineEngine loaded = load_offline_engine(flags.engine, largest, std::max(largest * flags.input_len, largest),
                                             flags.input_len + flags.output_len);
  const int vocab = loaded.model->info().vocab_size;
  std::mt19937_64 rng(flags.engine.seed);

  Json results = Json::array();
  std::printf("%-8s %12s %16s %16s %14s %12s\n", "batch", "prefill_ms", "decode_ms/step", "p90_decode_ms", "latency_s",
              "out_tok/s");
  for (int batch : sizes) {
    for (int i = 0; i < flags.num_iters_warmup; ++i) {
      run_batch(*loaded.engine, rng, batch, flags.input_len, flags.output_len, vocab);
    }
    std::vector<double> prefill_ms, decode_ms, latency_s;
    int prefill_steps = 0;
    for (int i = 0; i < flags.num_iters; ++i) {
      const EngineRun run = run_batch(*loaded.engine, rng, batch, flags.input_len, flags.output_len, vocab);
      double prefill = 0;
      for (const StepRecord& step : run.steps) {
        if (step.decode()) {
          decode_ms.push_back(1e3 * step.seconds);
        } else {
          prefill += 1e3 * step.seconds;
          ++prefill_steps;
        }
      }
      prefill_ms.push_back(prefill);
      latency_s.push_back(run.seconds);
    }
    const double decode_mean = mean(decode_ms);
    const double latency_mean = mean(latency_s);
    const double tokens_per_s = latency_mean > 0 ? batch * flags.output_len / latency_mean : 0;
    std::printf("%-8d %12.2f %16.3f %16.3f %14.3f %12.0f\n", batch, mean(prefill_ms), decode_mean,
                percentile(decode_ms, 90), latency_mean, tokens_per_s);
    std::fflush(stdout);
    results.push_back({{"batch_size", batch},
                       {"input_len", flags.input_len},
                       {"output_len", flags.output_len},
                       {"num_iters", flags.num_iters},
                       {"prefill_ms", mean(prefill_ms)},
                       {"prefill_steps_per_iter", prefill_steps / flags.num_iters},
                       {"decode_ms_per_step_mean", decode_mean},
                       {"decode_ms_per_step_p50", percentile(decode_ms, 50)},
                       {"decode_ms_per_step_p90", percentile(decode_ms, 90)},
                       {"avg_latency_s", latency_mean},
                       {"latencies_s", latency_s},
                       {"output_tokens_per_s", tokens_per_s}});
  }
  if (!flags.output_json.empty()) {
    std::ofstream out(flags.output_json);
    if (!out) throw_error(ErrorCode::kInvalidArgument, "--output-json {}: cannot write the file", flags.output_json);
    Json report = {{"model", flags.engine.model},
                   {"device", tensor::device_name(loaded.device)},
                   {"load_seconds", loaded.load_seconds},
                   {"results", results}};
    out << report.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

std::function<int()> add_latency_command(CLI::App& bench, CLI::App** sub) {
  auto flags = std::make_shared<LatencyFlags>();
  CLI::App* latency = bench.add_subcommand(
      "latency",
      "Time one batch of fixed-length requests through the engine in this process: prefill time, time per "
      "decode step, batch latency (the counterpart of `vllm bench latency`)");
  add_offline_engine_flags(*latency, flags->engine);
  latency->add_option("--input-len", flags->input_len, "Prompt tokens per request")->capture_default_str();
  latency->add_option("--output-len", flags->output_len, "Generated tokens per request")->capture_default_str();
  latency
      ->add_option("--batch-size", flags->batch_sizes,
                   "Requests in the batch; a comma-separated list (1,8,32) measures each in turn")
      ->capture_default_str();
  latency->add_option("--num-iters-warmup", flags->num_iters_warmup, "Untimed batches first, per batch size")
      ->capture_default_str();
  latency->add_option("--num-iters", flags->num_iters, "Timed batches per batch size")->capture_default_str();
  latency->add_option("--output-json", flags->output_json, "Write the results as JSON to this file");
  *sub = latency;
  return [flags] { return run_latency(*flags); };
}

}  // namespace omni::cli::bench
