#include "cli/bench/latency.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
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
  std::string messages;
  std::string mm_processor_kwargs;
};

// What each request of a batch asks: the chat of --messages, else random ids.
struct PromptSource {
  std::optional<ChatPrompt> chat;
  int input_len = 0;
  int vocab = 0;
};

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

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

struct BatchRun {
  EngineRun run;
  double add_ms = 0;  // adding the requests: the model encodes their media then
};

// One batch through the engine: every prompt is added before the first step.
BatchRun run_batch(engine::ArEngine& engine, std::mt19937_64& rng, int batch, const PromptSource& prompts,
                   int output_len) {
  BatchRun out;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < batch; ++i) {
    engine::EngineRequest request{std::to_string(i), {}, fixed_length_greedy(output_len), Json()};
    if (prompts.chat) {
      request.prompt_token_ids = prompts.chat->token_ids;
      request.additional_information = prompts.chat->additional_information;
    } else {
      request.prompt_token_ids = random_prompt(rng, prompts.input_len, prompts.vocab);
    }
    engine.add_request(std::move(request));
  }
  out.add_ms = milliseconds_since(start);
  out.run = run_until_done(engine);
  return out;
}

int run_latency(const LatencyFlags& flags, const ChatRenderer& render_chat) {
  if (flags.input_len < 1 || flags.output_len < 2) {
    throw_error(ErrorCode::kInvalidArgument, "--input-len must be >= 1 and --output-len >= 2 (got {} and {})",
                flags.input_len, flags.output_len);
  }
  if (flags.num_iters < 1 || flags.num_iters_warmup < 0) {
    throw_error(ErrorCode::kInvalidArgument, "--num-iters must be >= 1 and --num-iters-warmup >= 0");
  }
  if (!flags.mm_processor_kwargs.empty() && flags.messages.empty()) {
    throw_error(ErrorCode::kInvalidArgument, "--mm-processor-kwargs goes with --messages (the media it applies to)");
  }
  if (!flags.messages.empty() && !render_chat) {
    throw_error(ErrorCode::kInvalidArgument,
                "--messages needs the media layer: run `omnistage bench latency` (this binary has none)");
  }
  const std::vector<int> sizes = parse_batch_sizes(flags.batch_sizes);
  const int largest = *std::max_element(sizes.begin(), sizes.end());
  OfflineEngine loaded = load_offline_model(flags.engine);
  PromptSource prompts{std::nullopt, flags.input_len, loaded.model->info().vocab_size};
  if (!flags.messages.empty()) {
    prompts.chat = render_chat(flags.engine.model, flags.messages, flags.mm_processor_kwargs);
    // The prompt's length once the model has expanded its media placeholders.
    const std::optional<model::MultimodalPrompt> expanded =
        loaded.model->prepare_multimodal_prompt(prompts.chat->token_ids, prompts.chat->additional_information);
    prompts.input_len = static_cast<int>(expanded ? expanded->token_ids.size() : prompts.chat->token_ids.size());
    spdlog::info("--messages: a prompt of {} tokens ({} before the media's placeholders were expanded)",
                 prompts.input_len, prompts.chat->token_ids.size());
  }
  // A whole batch of prompts fits one step, so the first step is the batch's prefill.
  start_offline_engine(loaded, flags.engine, largest, std::max(largest * prompts.input_len, largest),
                       prompts.input_len + flags.output_len);
  std::mt19937_64 rng(flags.engine.seed);

  Json results = Json::array();
  std::printf("%-8s %10s %10s %12s %16s %16s %14s %12s\n", "batch", "prompt_tok", "media_ms", "prefill_ms",
              "decode_ms/step", "p90_decode_ms", "latency_s", "out_tok/s");
  for (int batch : sizes) {
    for (int i = 0; i < flags.num_iters_warmup; ++i) run_batch(*loaded.engine, rng, batch, prompts, flags.output_len);
    std::vector<double> media_ms, prefill_ms, decode_ms, latency_s;
    int prefill_steps = 0;
    for (int i = 0; i < flags.num_iters; ++i) {
      const BatchRun timed = run_batch(*loaded.engine, rng, batch, prompts, flags.output_len);
      const EngineRun& run = timed.run;
      media_ms.push_back(timed.add_ms);
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
      latency_s.push_back(run.seconds + timed.add_ms / 1e3);  // from the first add_request on
    }
    const double decode_mean = mean(decode_ms);
    const double latency_mean = mean(latency_s);
    const double tokens_per_s = latency_mean > 0 ? batch * flags.output_len / latency_mean : 0;
    std::printf("%-8d %10d %10.2f %12.2f %16.3f %16.3f %14.3f %12.0f\n", batch, prompts.input_len, mean(media_ms),
                mean(prefill_ms), decode_mean, percentile(decode_ms, 90), latency_mean, tokens_per_s);
    std::fflush(stdout);
    results.push_back({{"batch_size", batch},
                       {"input_len", prompts.input_len},
                       {"chat", prompts.chat.has_value()},
                       {"media_ms", mean(media_ms)},
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

std::function<int()> add_latency_command(CLI::App& bench, CLI::App** sub, ChatRenderer render_chat) {
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
  latency->add_option("--messages", flags->messages,
                      "Every request is this chat instead of random ids: a JSON list of messages as `generate "
                      "--messages` takes them (media parts as file paths or URLs); --input-len is then its length");
  latency->add_option("--mm-processor-kwargs", flags->mm_processor_kwargs,
                      "With --messages: the multimodal processor kwargs (JSON), as a chat request's");
  *sub = latency;
  return [flags, render_chat] { return run_latency(*flags, render_chat); };
}

}  // namespace omni::cli::bench
