// The engine on the real Qwen3 and Qwen2 CPU models (the tiny checkpoints of tests/data/tiny_qwen):
// every request's greedy and seeded output is the same alone, batched with requests of other
// lengths, under KV pressure that forces preemption, with chunked prefill and with prefix caching.
#include <gtest/gtest.h>


#include "engine/ar_engine.h"
#include "engine_test_util.h"
#include "model/model_registry.h"

namespace omni::engine {
namespace {

using testing::Results;
using testing::run_to_completion;

const std::string kDataDir = std::string(OMNI_SOURCE_DIR) + "/tests/data/tiny_qwen/";

// Below the special tokens.
std::vector<int32_t> prompt_of(int length, uint64_t seed, int vocab) {
  return testing::random_prompt(length, seed, vocab - 4);
}

// Prompts of 5 to 60 tokens; greedy ones, seeded ones with the checkpoint-style sampling
// (temperature, top-k, top-p) and penalties; two sharing a 32-token prefix. Every prompt plus its
// max_tokens fits the checkpoints' 128 positions.
std::vector<EngineRequest> requests_for(int vocab) {
  std::vector<EngineRequest> requests;
  auto add = [&](std::string id, std::vector<int32_t> prompt, SamplingParams params) {
    requests.push_back({std::move(id), std::move(prompt), std::move(params)});
  };
  add("greedy-5", prompt_of(5, 1, vocab), {.temperature = 0, .max_tokens = 40});
  add("greedy-40", prompt_of(40, 2, vocab), {.temperature = 0, .repetition_penalty = 1.3f, .max_tokens = 30});
  add("seeded-17", prompt_of(17, 3, vocab),
      {.temperature = 0.7f, .top_p = 0.8f, .top_k = 20, .seed = 7, .max_tokens = 40});
  add("seeded-60", prompt_of(60, 4, vocab),
      {.temperature = 1.0f, .presence_penalty = 0.5f, .seed = 8, .ignore_eos = true, .max_tokens = 50});
  std::vector<int32_t> shared = prompt_of(32, 5, vocab);
  std::vector<int32_t> a = shared, b = shared;
  for (int32_t t : prompt_of(9, 6, vocab)) a.push_back(t);
  for (int32_t t : prompt_of(20, 7, vocab)) b.push_back(t);
  add("shared-a", a, {.temperature = 0, .ignore_eos = true, .max_tokens = 45});
  add("shared-b", b, {.temperature = 0.9f, .min_p = 0.05f, .seed = 9, .max_tokens = 45});
  return requests;
}

class TinyQwenEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<model::CausalLm> load() {
    return model::builtin_model_registry().create_causal_lm(kDataDir + GetParam());
  }

  Results run(const std::vector<EngineRequest>& requests, EngineConfig config, EngineStats* stats = nullptr) {
    auto lm = load();
    ArEngine engine(*lm, config);
    for (const EngineRequest& r : requests) engine.add_request(r);
    Results results = run_to_completion(engine);
    EXPECT_FALSE(engine.has_unfinished_requests());
    EXPECT_EQ(engine.stats().num_free_blocks, engine.stats().num_blocks);
    if (stats) *stats = engine.stats();
    return results;
  }

  Results run_alone(const std::vector<EngineRequest>& requests) {
    Results all;
    for (const EngineRequest& r : requests) {
      EngineConfig config;
      config.num_gpu_blocks_override = 16;
      config.enable_prefix_caching = false;
      Results one = run({r}, config);
      all.insert(one.begin(), one.end());
    }
    return all;
  }

  static void expect_same(const Results& expected, const Results& actual, const std::string& scenario) {
    ASSERT_EQ(expected.size(), actual.size()) << scenario;
    for (const auto& [key, want] : expected) {
      ASSERT_TRUE(actual.count(key)) << scenario << ": " << key.first;
      EXPECT_EQ(actual.at(key).token_ids, want.token_ids) << scenario << ": " << key.first;
      EXPECT_EQ(actual.at(key).finish_reason, want.finish_reason) << scenario << ": " << key.first;
    }
  }
};

TEST_P(TinyQwenEngineTest, OutputsDoNotDependOnBatchingPreemptionChunkingOrPrefixCaching) {
  const int vocab = load()->info().vocab_size;
  const std::vector<EngineRequest> requests = requests_for(vocab);
  Results alone = run_alone(requests);
  size_t total = 0;
  for (const auto& [key, r] : alone) total += r.token_ids.size();
  EXPECT_GT(total, 150u) << "the requests generate long enough to cross several blocks";

  EngineConfig batched;
  batched.num_gpu_blocks_override = 64;
  batched.enable_prefix_caching = false;
  expect_same(alone, run(requests, batched), "batched");

  // 8 blocks hold one 128-token sequence: the six requests cannot all run at once.
  EngineConfig pressure = batched;
  pressure.num_gpu_blocks_override = 8;
  EngineStats stats;
  expect_same(alone, run(requests, pressure, &stats), "under KV pressure");
  EXPECT_GT(stats.num_preemptions, 0u);

  EngineConfig chunked = batched;
  chunked.max_num_batched_tokens = 16;
  chunked.max_num_seqs = 4;
  expect_same(alone, run(requests, chunked), "chunked prefill");

  // shared-b arrives after shared-a has been prefilled, so its first two blocks are cache hits.
  EngineConfig cached = batched;
  cached.enable_prefix_caching = true;
  {
    auto lm = load();
    ArEngine engine(*lm, cached);
    Results results;
    for (size_t i = 0; i + 1 < requests.size(); ++i) engine.add_request(requests[i]);
    for (const RequestOutput& out : engine.step()) testing::collect(out, results);
    engine.add_request(requests.back());
    Results rest = run_to_completion(engine);
    for (auto& [key, r] : rest) {
      auto& whole = results[key];
      whole.token_ids.insert(whole.token_ids.end(), r.token_ids.begin(), r.token_ids.end());
      whole.finish_reason = r.finish_reason;
    }
    expect_same(alone, results, "prefix caching");
    EXPECT_GE(engine.stats().prefix_cache.hit_blocks, 2u);
  }

  EngineConfig cached_pressure = pressure;
  cached_pressure.enable_prefix_caching = true;
  expect_same(alone, run(requests, cached_pressure, &stats), "prefix caching under KV pressure");
  EXPECT_GT(stats.num_preemptions, 0u);
  EXPECT_GT(stats.prefix_cache.hit_blocks, 0u);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, TinyQwenEngineTest,
                         ::testing::Values("qwen3_mha_untied_f32_v4", "qwen3_gqa2_tied_bf16_v5",
                                           "qwen2_gqa3_untied_f32_v5"));

}  // namespace
}  // namespace omni::engine
