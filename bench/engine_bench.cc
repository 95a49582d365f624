// The engine's own cost per decode step, without a model: what a step spends outside forward().
//   BM_EngineStep/<running>/<mode>: ArEngine::step() over `running` decoding sequences with Qwen's
//     151936-token vocabulary and a model that computes nothing (its logits rows are written once
//     and reused), so the time is scheduling, KV block bookkeeping and prefix-cache hashing, batch
//     building, sampling (in parallel over the CPU backend's threads), stop checks and outputs.
//     mode 0: greedy; mode 1: Qwen3's generation_config (temperature 0.7, top_k 20, top_p 0.8).
//   BM_SchedulerStep/<running>/<prefix caching>: the same with a 16-token vocabulary, so sampling
//     costs nothing and what remains is the scheduler and the bookkeeping.
//   BM_SamplerRow/<mode>: one row through the Sampler on one thread — greedy, Qwen3 defaults,
//     nucleus only (top_p 0.9 over the whole vocabulary), greedy with repetition and presence
//     penalties over a 512-token history.
// docs/performance.md records the results next to the model's time for one decode step.
#include <benchmark/benchmark.h>

#include <random>

#include "engine/ar_engine.h"
#include "engine/sampler.h"

namespace omni::engine {
namespace {

constexpr int kQwenVocab = 151936;

// Rows shaped like a language model's logits: a long tail and a handful of likely tokens that hold
// most of the probability (so a top_p nucleus is small, as it is for a trained model).
void fill_logits(std::span<float> row, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> tail(0.0f, 2.0f);
  for (float& l : row) l = tail(gen);
  for (int i = 0; i < 8; ++i) row[gen() % row.size()] += 16.0f + static_cast<float>(i);
}

// A CausalLm that computes nothing: rows it has written before are left as they are (the sampler
// does not modify rows without penalties, bias or min_tokens), so a steady decode batch costs it
// nothing.
class NullLm : public model::CausalLm {
 public:
  explicit NullLm(int vocab) {
    info_.vocab_size = vocab;
    info_.max_position_embeddings = 1 << 16;
  }
  const model::CausalLmInfo& info() const override { return info_; }
  size_t kv_bytes_per_block() const override { return 1; }
  void init_kv_cache(int) override {}
  void forward(const model::ForwardBatch& batch, std::vector<float>& logits) override {
    size_t rows = 0;
    for (const model::SequenceSlice& s : batch.seqs) rows += s.wants_logits;
    size_t written = logits.size() / info_.vocab_size;
    logits.resize(rows * info_.vocab_size);
    for (size_t r = written; r < rows; ++r) {
      fill_logits(std::span<float>(logits).subspan(r * info_.vocab_size, info_.vocab_size), static_cast<uint32_t>(r));
    }
  }

 private:
  model::CausalLmInfo info_;
};

SamplingParams qwen3_defaults() { return {.temperature = 0.7f, .top_p = 0.8f, .top_k = 20}; }

// Steps `running` decoding sequences; a sequence that finishes (every 8192 tokens) is replaced off
// the clock, so the batch stays the same size.
void run_decode_steps(benchmark::State& state, int vocab, int running, bool prefix_caching, SamplingParams params) {
  NullLm model(vocab);
  EngineConfig config;
  config.max_num_seqs = 256;
  config.max_num_batched_tokens = 8192;
  config.max_model_len = 8192 + 256;
  config.num_gpu_blocks_override = running * (config.max_model_len / model::kKvBlockSize);
  config.enable_prefix_caching = prefix_caching;
  ArEngine engine(model, config);
  std::mt19937 gen(1);
  params.ignore_eos = true;
  params.max_tokens = 8192;
  auto add = [&](std::string id) {
    std::vector<int32_t> prompt(128);
    for (int32_t& t : prompt) t = static_cast<int32_t>(gen() % vocab);
    engine.add_request({std::move(id), prompt, params});
  };
  // Adds back every finished request and steps until all are decoding again.
  auto refill = [&](std::vector<RequestOutput> outputs) {
    while (true) {
      bool added = false;
      for (const RequestOutput& out : outputs) {
        if (out.finished) {
          add(out.request_id);
          added = true;
        }
      }
      if (!added && engine.stats().num_waiting == 0) return;
      outputs = engine.step();
    }
  };
  for (int i = 0; i < running; ++i) add("r" + std::to_string(i));
  refill(engine.step());
  for (auto _ : state) {
    std::vector<RequestOutput> outputs = engine.step();
    bool finished = false;
    for (const RequestOutput& out : outputs) finished |= out.finished;
    if (finished) {
      state.PauseTiming();
      refill(std::move(outputs));
      state.ResumeTiming();
    }
  }
  state.counters["running"] = engine.stats().num_running;
}

void BM_EngineStep(benchmark::State& state) {
  SamplingParams params = state.range(1) == 0 ? SamplingParams{.temperature = 0} : qwen3_defaults();
  run_decode_steps(state, kQwenVocab, static_cast<int>(state.range(0)), true, params);
}
BENCHMARK(BM_EngineStep)
    ->ArgsProduct({{1, 64, 256}, {0, 1}})
    ->ArgNames({"running", "mode"})
    ->MeasureProcessCPUTime()  // sampling runs on the CPU backend's threads too
    ->Unit(benchmark::kMillisecond);

void BM_SchedulerStep(benchmark::State& state) {
  run_decode_steps(state, 16, static_cast<int>(state.range(0)), state.range(1) != 0, {.temperature = 0});
}
BENCHMARK(BM_SchedulerStep)
    ->ArgsProduct({{1, 64, 256}, {0, 1}})
    ->ArgNames({"running", "prefix_caching"})
    ->Unit(benchmark::kMicrosecond);

void BM_SamplerRow(benchmark::State& state) {
  SamplingParams params;
  switch (state.range(0)) {
    case 0:
      params.temperature = 0;
      break;
    case 1:
      params = qwen3_defaults();
      break;
    case 2:
      params = {.temperature = 1.0f, .top_p = 0.9f};
      break;
    default:
      params = {.temperature = 0, .presence_penalty = 0.5f, .repetition_penalty = 1.1f};
      break;
  }
  params = validated(params);
  std::vector<float> reference(kQwenVocab);
  fill_logits(reference, 7);
  std::mt19937 gen(3);
  std::vector<int32_t> history(512);
  for (int32_t& t : history) t = static_cast<int32_t>(gen() % kQwenVocab);
  std::span<const int32_t> prompt = std::span<const int32_t>(history).first(256);
  std::span<const int32_t> output = std::span<const int32_t>(history).subspan(256);

  Sampler sampler;
  SamplingRng rng(1);
  std::vector<float> row(kQwenVocab);
  for (auto _ : state) {
    std::copy(reference.begin(), reference.end(), row.begin());  // penalties modify the row
    benchmark::DoNotOptimize(sampler.sample(row, SamplingState{params, prompt, output, {}, rng}));
  }
}
BENCHMARK(BM_SamplerRow)->DenseRange(0, 3)->ArgName("mode")->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace omni::engine

BENCHMARK_MAIN();
