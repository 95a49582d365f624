// The engine with async scheduling (ArEngine over CausalLm::launch_step/wait_step) against the
// synchronous engine: the same outputs for every kind of request and engine setting. The CPU
// model's default launch_step runs each step at once, so the pipelining logic (placeholders, inputs
// read from the previous step's rows, tokens discarded after a stop) runs exactly as on a GPU.
#include <gtest/gtest.h>

#include "base/error.h"
#include "engine/ar_engine.h"
#include "engine_test_util.h"
#include "fake_causal_lm.h"

namespace omni::engine {
namespace {

using testing::Completed;
using testing::FakeCausalLm;
using testing::FakeDetokenizer;
using testing::Results;
using testing::run_to_completion;

constexpr int kVocab = 97;
constexpr int32_t kEos = 96;

// Counts the launched steps that read some input from the previous step's ids.
class CountingLm : public FakeCausalLm {
 public:
  CountingLm() : FakeCausalLm(kVocab, {kEos}) {
    // EOS becomes likely after a few tokens, so sequences stop mid-batch at different steps.
    preferred = [](std::span<const int32_t> history) {
      uint64_t h = 0;
      for (int32_t t : history) h = h * 31 + static_cast<uint64_t>(t);
      return h % 11 == 0 ? kEos : static_cast<int32_t>(h % 7);
    };
    boost = 3.0f;
  }
  void launch_step(const model::ForwardBatch& batch, std::span<const tensor::ops::SamplingParams> params,
                   std::span<const int32_t> previous_rows) override {
    ++num_launches;
    if (!previous_rows.empty()) ++num_chained_launches;
    FakeCausalLm::launch_step(batch, params, previous_rows);
  }
  int num_launches = 0;
  int num_chained_launches = 0;
};

std::vector<int32_t> prompt_of(int length, uint64_t seed) { return testing::random_prompt(length, seed, kVocab - 1); }

// Requests that the engine pipelines: greedy and seeded with filters, n > 1, EOS, max_tokens.
std::vector<EngineRequest> pipelined_requests() {
  std::vector<EngineRequest> requests;
  auto add = [&](std::string id, std::vector<int32_t> prompt, SamplingParams params) {
    requests.push_back({std::move(id), std::move(prompt), std::move(params)});
  };
  add("greedy-3", prompt_of(3, 1), {.temperature = 0, .max_tokens = 30});
  add("greedy-33", prompt_of(33, 2), {.temperature = 0, .max_tokens = 25});
  add("seeded-17", prompt_of(17, 3), {.temperature = 0.8f, .top_p = 0.9f, .seed = 11, .max_tokens = 40});
  add("seeded-64", prompt_of(64, 4), {.temperature = 1.3f, .top_k = 20, .min_p = 0.05f, .seed = 12, .max_tokens = 20});
  add("n3", prompt_of(20, 9), {.n = 3, .temperature = 1.0f, .seed = 100, .max_tokens = 12});
  add("long", prompt_of(40, 10), {.temperature = 0.6f, .seed = 5, .ignore_eos = true, .max_tokens = 60});
  std::vector<int32_t> shared = prompt_of(48, 5);
  std::vector<int32_t> a = shared, b = shared;
  for (int32_t t : prompt_of(22, 6)) a.push_back(t);
  for (int32_t t : prompt_of(5, 7)) b.push_back(t);
  add("shared-a", a, {.temperature = 0, .max_tokens = 35});
  add("shared-b", b, {.temperature = 0.7f, .seed = 13, .max_tokens = 35});
  add("unseeded", prompt_of(10, 11), {.temperature = 1.0f, .max_tokens = 15});
  return requests;
}

EngineConfig config_with(int num_blocks, int max_model_len = 256, bool async = false) {
  EngineConfig c;
  c.num_gpu_blocks_override = num_blocks;
  c.max_model_len = max_model_len;
  c.enable_prefix_caching = false;
  c.max_num_seqs = 16;
  c.seed = 77;
  c.async_scheduling = async;
  return c;
}

struct EngineRun {
  Results results;
  EngineStats stats;
  int num_launches = 0;
  int num_chained_launches = 0;
  int num_rows = 0;  // sequence slices fed to the model, over all steps
};

EngineRun run_engine(const std::vector<EngineRequest>& requests, EngineConfig config, bool async,
                     const Detokenizer* detokenizer = nullptr) {
  config.async_scheduling = async;
  CountingLm model;
  ArEngine engine(model, config, detokenizer);
  for (const EngineRequest& r : requests) engine.add_request(r);
  EngineRun out;
  out.results = run_to_completion(engine);
  out.stats = engine.stats();
  out.num_launches = model.num_launches;
  out.num_chained_launches = model.num_chained_launches;
  for (const auto& batch : model.batches()) out.num_rows += static_cast<int>(batch.size());
  EXPECT_EQ(out.stats.num_free_blocks, out.stats.num_blocks) << "every block is returned";
  EXPECT_FALSE(engine.has_unfinished_requests());
  return out;
}

void expect_same(const Results& expected, const Results& actual) {
  ASSERT_EQ(expected.size(), actual.size());
  for (const auto& [key, want] : expected) {
    auto it = actual.find(key);
    ASSERT_NE(it, actual.end()) << key.first << "/" << key.second;
    EXPECT_EQ(want.token_ids, it->second.token_ids) << key.first << "/" << key.second;
    EXPECT_EQ(want.finish_reason, it->second.finish_reason) << key.first << "/" << key.second;
    EXPECT_EQ(want.stop_reason, it->second.stop_reason) << key.first << "/" << key.second;
    EXPECT_EQ(want.text, it->second.text) << key.first << "/" << key.second;
    EXPECT_EQ(want.num_logprobs, it->second.num_logprobs) << key.first << "/" << key.second;
  }
}

TEST(AsyncSchedulingTest, GivesTheSynchronousOutputsAndChainsSteps) {
  EngineRun sync = run_engine(pipelined_requests(), config_with(64), false);
  EngineRun async = run_engine(pipelined_requests(), config_with(64), true);
  expect_same(sync.results, async.results);
  EXPECT_EQ(sync.num_launches, 0) << "the synchronous engine never launches";
  EXPECT_GT(async.num_chained_launches, async.num_launches / 2) << "decode steps read the previous step's ids";
  int stopped_by_eos = 0;
  for (const auto& [key, r] : sync.results) stopped_by_eos += r.finish_reason == FinishReason::kStop;
  EXPECT_GT(stopped_by_eos, 2) << "sequences stop by EOS mid-batch";
  // Each sequence stopped by EOS was scheduled once more before its stop was known; that row is discarded.
  EXPECT_GT(async.num_rows, sync.num_rows);
}

TEST(AsyncSchedulingTest, SameOutputsUnderPreemptionChunkingAndPrefixCaching) {
  std::vector<EngineRequest> requests = pipelined_requests();
  Results expected = run_engine(requests, config_with(64), false).results;

  EngineRun tight = run_engine(requests, config_with(12, 192), true);
  expect_same(expected, tight.results);
  EXPECT_GT(tight.stats.num_preemptions, 0u);

  EngineConfig cached = config_with(12, 192);
  cached.enable_prefix_caching = true;
  EngineRun cached_run = run_engine(requests, cached, true);
  expect_same(expected, cached_run.results);
  EXPECT_GT(cached_run.stats.num_preemptions, 0u);
  EXPECT_GT(cached_run.stats.prefix_cache.hit_blocks, 0u);

  EngineConfig chunked = config_with(64);
  chunked.max_num_batched_tokens = 24;
  chunked.max_num_seqs = 4;
  EngineRun chunked_run = run_engine(requests, chunked, true);
  expect_same(expected, chunked_run.results);
  EXPECT_GT(chunked_run.num_chained_launches, 0);
}

TEST(AsyncSchedulingTest, MaxModelLenEndsSequencesWithoutSchedulingPastIt) {
  std::vector<EngineRequest> requests = {{"r", prompt_of(30, 1), {.temperature = 0, .ignore_eos = true}},
                                         {"s", prompt_of(25, 2), {.temperature = 0.9f, .seed = 3, .ignore_eos = true}}};
  // The fake model throws for a block table that cannot hold a position, so scheduling a
  // placeholder past max_model_len (40 tokens, 3 blocks) would fail the run.
  EngineRun sync = run_engine(requests, config_with(8, 40), false);
  EngineRun async = run_engine(requests, config_with(8, 40), true);
  expect_same(sync.results, async.results);
  EXPECT_EQ(async.results.at({"r", 0}).token_ids.size(), 10u);
  EXPECT_EQ(async.results.at({"r", 0}).finish_reason, FinishReason::kLength);
}

TEST(AsyncSchedulingTest, RequestsNeedingHostHistoryRunSynchronouslyWithTheSameOutputs) {
  std::vector<EngineRequest> requests = pipelined_requests();
  requests.push_back({"penalised",
                      prompt_of(33, 20),
                      {.temperature = 0, .presence_penalty = 0.5f, .repetition_penalty = 1.2f, .max_tokens = 8}});
  requests.push_back({"logprobs", prompt_of(12, 21), {.temperature = 0.7f, .seed = 4, .max_tokens = 6, .logprobs = 2}});
  EngineRun sync = run_engine(requests, config_with(64), false);
  EngineRun async = run_engine(requests, config_with(64), true);
  expect_same(sync.results, async.results);
  EXPECT_EQ(async.results.at({"logprobs", 0}).num_logprobs, 6);
  EXPECT_GT(async.num_chained_launches, 0) << "once they finish, the rest is pipelined again";
}

TEST(AsyncSchedulingTest, StopStringsAndStopTokensCutTheSameText) {
  const std::vector<std::string> pieces = {"Hel", "lo", " wor", "ld", "!", "\xE2\x82", "\xAC", "<eos>", "x"};
  FakeDetokenizer detokenizer(pieces, {7});
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 6; ++i) {
    SamplingParams p{.temperature = i % 2 ? 0.0f : 1.0f, .seed = i, .max_tokens = 12};
    if (i < 2) p.stop = {"o wo"};
    if (i == 2) p.stop = {"ld!", "wor"};
    if (i == 3) p.stop_token_ids = {4};
    if (i == 4) {
      p.stop = {"lo"};
      p.include_stop_str_in_output = true;
    }
    requests.push_back({"r" + std::to_string(i), {8, 8, static_cast<int32_t>(i)}, p});
  }
  auto run_small = [&](bool async) {
    FakeCausalLm model(9, {7});
    EngineConfig config = config_with(32);
    config.async_scheduling = async;
    ArEngine engine(model, config, &detokenizer);
    for (const EngineRequest& r : requests) engine.add_request(r);
    return run_to_completion(engine);
  };
  Results sync = run_small(false);
  Results async = run_small(true);
  expect_same(sync, async);
  int stopped = 0;
  for (const auto& [key, r] : sync) stopped += r.finish_reason == FinishReason::kStop;
  EXPECT_GT(stopped, 0);
}

TEST(AsyncSchedulingTest, RequestsJoiningAndAbortingMidRun) {
  std::vector<EngineRequest> requests = pipelined_requests();
  Results expected = run_engine(requests, config_with(64), false).results;

  CountingLm model;
  ArEngine engine(model, config_with(64, 256, true));
  Results results;
  size_t next = 0;
  int step = 0;
  bool aborted = false;
  while (next < requests.size() || engine.has_unfinished_requests()) {
    // One new request every other step, while others are decoding.
    if (next < requests.size() && step % 2 == 0) engine.add_request(requests[next++]);
    if (step == 16) {
      auto out = engine.abort("long");
      ASSERT_TRUE(out);
      EXPECT_TRUE(out->finished);
      testing::collect(*out, results);
      aborted = true;
    }
    for (const RequestOutput& out : engine.step()) testing::collect(out, results);
    ++step;
    ASSERT_LT(step, 10000);
  }
  ASSERT_TRUE(aborted);
  EXPECT_EQ(engine.stats().num_free_blocks, engine.stats().num_blocks);
  const Completed& long_run = results.at({"long", 0});
  EXPECT_EQ(long_run.finish_reason, FinishReason::kAbort);
  const std::vector<int32_t>& full = expected.at({"long", 0}).token_ids;
  ASSERT_LE(long_run.token_ids.size(), full.size());
  EXPECT_TRUE(std::equal(long_run.token_ids.begin(), long_run.token_ids.end(), full.begin()))
      << "what was sent before the abort is the synchronous output's beginning";
  results.erase({"long", 0});
  expected.erase({"long", 0});
  expect_same(expected, results);
  EXPECT_GT(model.num_chained_launches, 0);
}

TEST(AsyncSchedulingTest, AbortAllLeavesNothingInFlight) {
  CountingLm model;
  ArEngine engine(model, config_with(64, 256, true));
  for (const EngineRequest& r : pipelined_requests()) engine.add_request(r);
  EXPECT_TRUE(engine.step().empty()) << "the first step's tokens arrive with the second step";
  size_t finished = 0;
  for (int i = 0; i < 2; ++i) {
    for (const RequestOutput& out : engine.step()) finished += out.finished;
  }
  std::vector<RequestOutput> aborted = engine.abort_all(Error(ErrorCode::kUnavailable, "shutting down"));
  EXPECT_EQ(aborted.size() + finished, pipelined_requests().size());
  EXPECT_GT(aborted.size(), 0u);
  // The step still on the device is read (and dropped) by the next step.
  EXPECT_TRUE(engine.has_unfinished_requests());
  EXPECT_TRUE(engine.step().empty());
  EXPECT_FALSE(engine.has_unfinished_requests());
  EXPECT_EQ(engine.stats().num_free_blocks, engine.stats().num_blocks);
  // And the engine carries on with new requests, with the synchronous outputs.
  EngineRequest again = pipelined_requests()[2];
  engine.add_request(again);
  Results after = run_to_completion(engine);
  Results expected = run_engine({again}, config_with(64), false).results;
  expect_same(expected, after);
}

TEST(CausalLmLaunchStepTest, DefaultReadsPreviousRowsAndReturnsIdsInOrder) {
  FakeCausalLm model(kVocab, {kEos});
  model.init_kv_cache(4);
  auto slice = [](int32_t start, int32_t len, int32_t context, int32_t block) {
    model::SequenceSlice s;
    s.query_start = start;
    s.query_len = len;
    s.context_len = context;
    s.block_table = {block};
    return s;
  };
  model::ForwardBatch prefill;
  prefill.token_ids = {5, 6, 7, 8};
  prefill.positions = {0, 1, 0, 1};
  prefill.seqs = {slice(0, 2, 0, 0), slice(2, 2, 0, 1)};
  model.launch_step(prefill, {}, {});
  std::vector<int32_t> first;
  // The second step reads both inputs from the first step's rows, swapped back into place.
  model::ForwardBatch decode;
  decode.token_ids = {0, 0};
  decode.positions = {2, 2};
  decode.seqs = {slice(0, 1, 2, 0), slice(1, 1, 2, 1)};
  const std::vector<int32_t> rows = {0, 1};
  model.launch_step(decode, {}, rows);
  model.wait_step(first);
  std::vector<int32_t> second;
  model.wait_step(second);
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(second.size(), 2u);

  FakeCausalLm reference(kVocab, {kEos});
  reference.init_kv_cache(4);
  std::vector<int32_t> want_first, want_second;
  reference.forward_greedy(prefill, want_first);
  model::ForwardBatch resolved = decode;
  resolved.token_ids = want_first;
  reference.forward_greedy(resolved, want_second);
  EXPECT_EQ(first, want_first);
  EXPECT_EQ(second, want_second);

  EXPECT_THROW(model.wait_step(second), Error) << "nothing outstanding";
  const std::vector<int32_t> bad = {0, 5};
  try {
    model.launch_step(decode, {}, bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("row 5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace omni::engine
