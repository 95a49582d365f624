#include "engine/ar_engine.h"

#include <gtest/gtest.h>

#include "base/error.h"
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

std::vector<int32_t> prompt_of(int length, uint64_t seed) { return testing::random_prompt(length, seed, kVocab - 1); }

// A mix of prompt lengths (inside one block, across several, exact multiples), greedy and seeded
// sampling with every kind of processing, two prompts sharing a 48-token prefix.
std::vector<EngineRequest> mixed_requests() {
  std::vector<EngineRequest> requests;
  auto add = [&](std::string id, std::vector<int32_t> prompt, SamplingParams params) {
    requests.push_back({std::move(id), std::move(prompt), std::move(params)});
  };
  add("greedy-3", prompt_of(3, 1), {.temperature = 0, .max_tokens = 30});
  add("greedy-33", prompt_of(33, 2),
      {.temperature = 0, .presence_penalty = 0.5f, .repetition_penalty = 1.2f, .max_tokens = 25});
  add("seeded-17", prompt_of(17, 3), {.temperature = 0.8f, .top_p = 0.9f, .seed = 11, .max_tokens = 40});
  add("seeded-64", prompt_of(64, 4),
      {.temperature = 1.3f, .top_k = 20, .min_p = 0.05f, .frequency_penalty = 0.3f, .seed = 12, .max_tokens = 20});
  std::vector<int32_t> shared = prompt_of(48, 5);
  std::vector<int32_t> a = shared, b = shared;
  for (int32_t t : prompt_of(22, 6)) a.push_back(t);
  for (int32_t t : prompt_of(5, 7)) b.push_back(t);
  add("shared-a", a, {.temperature = 0, .max_tokens = 35, .logprobs = 2});
  add("shared-b", b, {.temperature = 0.7f, .seed = 13, .max_tokens = 35, .logprobs = 0});
  add("seeded-100", prompt_of(100, 8), {.temperature = 1.0f, .seed = 14, .max_tokens = 30});
  return requests;
}

EngineConfig config_with(int num_blocks, int max_model_len = 256) {
  EngineConfig c;
  c.num_gpu_blocks_override = num_blocks;
  c.max_model_len = max_model_len;
  c.enable_prefix_caching = false;
  c.max_num_seqs = 16;
  return c;
}

Results run_alone(const std::vector<EngineRequest>& requests) {
  Results all;
  for (const EngineRequest& r : requests) {
    FakeCausalLm model(kVocab, {kEos});
    ArEngine engine(model, config_with(64));
    engine.add_request(r);
    Results one = run_to_completion(engine);
    all.insert(one.begin(), one.end());
  }
  return all;
}

Results run_together(const std::vector<EngineRequest>& requests, const EngineConfig& config,
                     EngineStats* stats = nullptr, FakeCausalLm* model_out = nullptr) {
  FakeCausalLm local(kVocab, {kEos});
  FakeCausalLm& model = model_out ? *model_out : local;
  ArEngine engine(model, config);
  for (const EngineRequest& r : requests) engine.add_request(r);
  Results results = run_to_completion(engine);
  if (stats) *stats = engine.stats();
  EXPECT_EQ(engine.stats().num_free_blocks, engine.stats().num_blocks) << "every block is returned";
  return results;
}

void expect_same(const Results& expected, const Results& actual) {
  ASSERT_EQ(expected.size(), actual.size());
  for (const auto& [key, want] : expected) {
    auto it = actual.find(key);
    ASSERT_NE(it, actual.end()) << key.first;
    EXPECT_EQ(want.token_ids, it->second.token_ids) << key.first;
    EXPECT_EQ(want.finish_reason, it->second.finish_reason) << key.first;
    EXPECT_EQ(want.num_logprobs, it->second.num_logprobs) << key.first;
  }
}

TEST(ArEngineTest, RequestsFinishWithTheReasonsVllmGives) {
  Results alone = run_alone(mixed_requests());
  ASSERT_EQ(alone.size(), 7u);
  for (const auto& [key, r] : alone) {
    ASSERT_TRUE(r.finish_reason) << key.first;
    if (*r.finish_reason == FinishReason::kStop) {
      EXPECT_EQ(r.token_ids.back(), kEos) << key.first;
    } else {
      EXPECT_EQ(*r.finish_reason, FinishReason::kLength) << key.first;
    }
    EXPECT_EQ(std::count(r.token_ids.begin(), r.token_ids.end() - 1, kEos), 0) << key.first;
  }
  EXPECT_EQ(alone.at({"greedy-3", 0}).token_ids.size() <= 30, true);
  EXPECT_EQ(alone.at({"shared-a", 0}).num_logprobs, static_cast<int>(alone.at({"shared-a", 0}).token_ids.size()));
}

TEST(ArEngineTest, BatchedOutputsEqualSoloOutputs) {
  Results alone = run_alone(mixed_requests());
  EngineStats stats;
  expect_same(alone, run_together(mixed_requests(), config_with(64), &stats));
  EXPECT_EQ(stats.num_preemptions, 0u);
}

TEST(ArEngineTest, OutputsSurvivePreemptionUnderKvPressure) {
  Results alone = run_alone(mixed_requests());
  // 12 blocks hold one max-length (192-token) sequence but far from all seven at once.
  EngineStats stats;
  expect_same(alone, run_together(mixed_requests(), config_with(12, 192), &stats));
  EXPECT_GT(stats.num_preemptions, 0u);

  EngineConfig cached = config_with(12, 192);
  cached.enable_prefix_caching = true;
  expect_same(alone, run_together(mixed_requests(), cached, &stats));
  EXPECT_GT(stats.num_preemptions, 0u);
  EXPECT_GT(stats.prefix_cache.hit_blocks, 0u) << "resumed sequences reuse their own cached blocks";
}

TEST(ArEngineTest, OutputsAreTheSameWithChunkedPrefillAndSmallTokenBudgets) {
  Results alone = run_alone(mixed_requests());
  FakeCausalLm model(kVocab, {kEos});
  EngineConfig chunked = config_with(64);
  chunked.max_num_batched_tokens = 24;
  chunked.max_num_seqs = 4;
  expect_same(alone, run_together(mixed_requests(), chunked, nullptr, &model));
  bool mixed_batch = false;
  for (const FakeCausalLm::Batch& batch : model.batches()) {
    int tokens = 0;
    bool prefill_chunk = false, decode = false;
    for (const auto& s : batch) {
      tokens += s.query_len;
      prefill_chunk |= !s.wants_logits;
      decode |= s.query_len == 1 && s.context_len > 0;
    }
    EXPECT_LE(tokens, 24);
    EXPECT_LE(batch.size(), 4u);
    mixed_batch |= prefill_chunk && decode;
  }
  EXPECT_TRUE(mixed_batch) << "a prefill chunk shared a batch with decodes";

  EngineConfig whole = config_with(64, 160);
  whole.enable_chunked_prefill = false;
  whole.max_num_batched_tokens = 160;
  FakeCausalLm unchunked_model(kVocab, {kEos});
  expect_same(alone, run_together(mixed_requests(), whole, nullptr, &unchunked_model));
  for (const FakeCausalLm::Batch& batch : unchunked_model.batches()) {
    for (const auto& s : batch) EXPECT_TRUE(s.wants_logits) << "without chunking every prompt runs whole";
  }
}

TEST(ArEngineTest, PrefixCacheHitsReuseBlocksWithoutChangingOutputs) {
  std::vector<EngineRequest> requests = mixed_requests();
  Results alone = run_alone(requests);
  FakeCausalLm model(kVocab, {kEos});
  EngineConfig config = config_with(64);
  config.enable_prefix_caching = true;
  ArEngine engine(model, config);
  // shared-a first, alone; then shared-b, whose first three blocks are shared-a's prompt blocks.
  engine.add_request(requests[4]);
  Results a = run_to_completion(engine);
  PrefixCacheStats first = engine.stats().prefix_cache;
  EXPECT_EQ(first.hit_blocks, 0u);
  EXPECT_EQ(first.miss_blocks, 4u);  // 70 tokens: the 4 full blocks before the last token
  engine.add_request(requests[5]);
  Results b;
  for (const RequestOutput& out : engine.step()) testing::collect(out, b);
  PrefixCacheStats stats = engine.stats().prefix_cache;
  EXPECT_EQ(stats.hit_blocks, 3u);
  EXPECT_EQ(stats.hit_tokens, 48u);
  EXPECT_EQ(stats.miss_blocks, 4u) << "shared-b has 53 tokens: blocks 0-2 can hit, and all did";
  EXPECT_EQ(model.batches().back().front().context_len, 48) << "only the 5 uncached tokens were prefilled";
  for (const auto& [key, rest] : run_to_completion(engine)) {
    Completed& whole = b[key];
    whole.token_ids.insert(whole.token_ids.end(), rest.token_ids.begin(), rest.token_ids.end());
    whole.finish_reason = rest.finish_reason;
  }
  EXPECT_EQ(a.at({"shared-a", 0}).token_ids, alone.at({"shared-a", 0}).token_ids);
  EXPECT_EQ(b.at({"shared-b", 0}).token_ids, alone.at({"shared-b", 0}).token_ids);
  EXPECT_EQ(b.at({"shared-b", 0}).finish_reason, alone.at({"shared-b", 0}).finish_reason);
}

TEST(ArEngineTest, AbortFreesEveryBlockAndEndsWithAbort) {
  FakeCausalLm model(kVocab, {kEos});
  for (bool caching : {false, true}) {
    EngineConfig config = config_with(20, 160);
    config.enable_prefix_caching = caching;
    config.max_num_batched_tokens = 64;
    config.max_num_seqs = 8;
    ArEngine engine(model, config);
    std::vector<EngineRequest> requests = mixed_requests();
    for (EngineRequest& r : requests) {
      r.sampling_params.max_tokens = 50;
      r.sampling_params.ignore_eos = true;
      engine.add_request(r);
    }
    for (int i = 0; i < 6; ++i) engine.step();
    EngineStats mid = engine.stats();
    EXPECT_GT(mid.num_running, 0);
    EXPECT_GT(mid.num_waiting, 0) << "some are still waiting (or preempted)";
    EXPECT_LT(mid.num_free_blocks, mid.num_blocks);

    auto out = engine.abort("seeded-100");
    ASSERT_TRUE(out);
    EXPECT_TRUE(out->finished);
    ASSERT_EQ(out->completions.size(), 1u);
    EXPECT_EQ(out->completions[0].finish_reason, FinishReason::kAbort);
    EXPECT_FALSE(engine.abort("seeded-100")) << "already gone";
    EXPECT_FALSE(engine.abort("no-such-request"));

    std::vector<RequestOutput> rest = engine.abort_all(Error(ErrorCode::kUnavailable, "shutting down"));
    EXPECT_EQ(rest.size(), requests.size() - 1);
    for (const RequestOutput& r : rest) {
      EXPECT_TRUE(r.finished);
      ASSERT_TRUE(r.error);
      EXPECT_STREQ(r.error->what(), "shutting down");
    }
    EngineStats after = engine.stats();
    EXPECT_EQ(after.num_free_blocks, after.num_blocks) << (caching ? "with" : "without") << " prefix caching";
    EXPECT_EQ(after.num_running, 0);
    EXPECT_EQ(after.num_waiting, 0);
    EXPECT_FALSE(engine.has_unfinished_requests());
    EXPECT_TRUE(engine.step().empty());
  }
}

TEST(ArEngineTest, ParallelSamplingGivesCompletionISeedPlusI) {
  EngineRequest r{"n3", prompt_of(20, 9), {.n = 3, .temperature = 1.0f, .seed = 100, .max_tokens = 12}};
  FakeCausalLm model(kVocab, {kEos});
  ArEngine engine(model, config_with(64));
  engine.add_request(r);
  Results together = run_to_completion(engine);
  ASSERT_EQ(together.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EngineRequest single = r;
    single.sampling_params.n = 1;
    single.sampling_params.seed = 100 + i;
    Results alone = run_alone({single});
    EXPECT_EQ(together.at({"n3", i}).token_ids, alone.at({"n3", 0}).token_ids) << i;
  }
  EXPECT_NE(together.at({"n3", 0}).token_ids, together.at({"n3", 1}).token_ids);
}

TEST(ArEngineTest, AdmitsFirstComeFirstServed) {
  FakeCausalLm model(kVocab, {kEos});
  EngineConfig config = config_with(64);
  config.max_num_seqs = 1;
  ArEngine engine(model, config);
  for (int i = 0; i < 4; ++i) {
    engine.add_request({"r" + std::to_string(i), prompt_of(10 + i, 20 + i), {.temperature = 0, .max_tokens = 3}});
  }
  std::vector<std::string> finished;
  while (engine.has_unfinished_requests()) {
    for (const RequestOutput& out : engine.step()) {
      if (out.finished) finished.push_back(out.request_id);
    }
    EXPECT_LE(engine.stats().num_running, 1);
  }
  EXPECT_EQ(finished, (std::vector<std::string>{"r0", "r1", "r2", "r3"}));
}

// The fake model's next token follows `script` after the prompt (then keeps to the hashed logits).
void follow_script(FakeCausalLm& model, int prompt_len, std::vector<int32_t> script) {
  model.preferred = [prompt_len, script](std::span<const int32_t> history) {
    size_t i = history.size() - prompt_len;
    return i < script.size() ? script[i] : 0;
  };
}

struct StopCase {
  std::vector<std::string> pieces = {"Hel", "lo", " wor", "ld", "!", "\xE2\x82", "\xAC", "<eos>", "x"};
  FakeDetokenizer detokenizer{pieces, {7}};
  FakeCausalLm model{9, {7}};
  std::vector<int32_t> prompt = {8, 8, 8};
};

Completed run_script(StopCase& c, std::vector<int32_t> script, SamplingParams params) {
  follow_script(c.model, 3, std::move(script));
  params.temperature = 0;
  ArEngine engine(c.model, config_with(16), &c.detokenizer);
  engine.add_request({"s", c.prompt, params});
  return run_to_completion(engine).at({"s", 0});
}

TEST(ArEngineStopTest, StopStringsSpanningTokensStopAndAreCut) {
  StopCase c;
  // "Hel" "lo" " wor" "ld": the stop string "o wo" starts in the 2nd token and ends in the 3rd.
  Completed r = run_script(c, {0, 1, 2, 3, 4}, {.stop = {"o wo"}, .max_tokens = 10});
  EXPECT_EQ(r.finish_reason, FinishReason::kStop);
  EXPECT_EQ(r.stop_reason, StopReason(std::string("o wo")));
  EXPECT_EQ(r.text, "Hell");
  EXPECT_EQ(r.token_ids, (std::vector<int32_t>{0, 1, 2})) << "token ids are kept up to the completing token";
  for (const std::string& delta : r.text_deltas) EXPECT_EQ(delta.find('o'), std::string::npos) << delta;

  Completed kept = run_script(c, {0, 1, 2, 3, 4}, {.stop = {"o wo"}, .include_stop_str_in_output = true});
  EXPECT_EQ(kept.text, "Hello wo");
  EXPECT_EQ(kept.stop_reason, StopReason(std::string("o wo")));

  // The first stop string in list order wins; a stop string inside one token works too.
  Completed first = run_script(c, {0, 1, 2, 3, 4}, {.stop = {"ld!", "wor"}, .max_tokens = 10});
  EXPECT_EQ(first.text, "Hello ");
  EXPECT_EQ(first.stop_reason, StopReason(std::string("wor")));
}

TEST(ArEngineStopTest, TextStreamsWholeCharactersAndHoldsBackPossibleStopStrings) {
  StopCase c;
  // "€" arrives split over two tokens.
  Completed euro = run_script(c, {5, 6, 0, 1}, {.max_tokens = 4});
  EXPECT_EQ(euro.text,
            "\xE2\x82\xAC"
            "Hello");
  EXPECT_EQ(euro.finish_reason, FinishReason::kLength);
  EXPECT_EQ(euro.text_deltas.front(), "\xE2\x82\xAC");

  // With a 4-byte stop string, text arrives 3 bytes late, and the final output flushes the rest.
  Completed held = run_script(c, {0, 1, 2, 3}, {.stop = {"zzzz"}, .max_tokens = 4});
  EXPECT_EQ(held.text, "Hello world");
  EXPECT_EQ(held.text_deltas, (std::vector<std::string>{"He", "llo ", "world"}));
}

TEST(ArEngineStopTest, StopTokensEosMinTokensAndIgnoreEos) {
  StopCase c;
  Completed token = run_script(c, {0, 4, 1}, {.stop_token_ids = {4}, .max_tokens = 10});
  EXPECT_EQ(token.finish_reason, FinishReason::kStop);
  EXPECT_EQ(token.stop_reason, StopReason(int32_t{4}));
  EXPECT_EQ(token.token_ids, (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(token.text, "Hel") << "the stop token's text is left out";
  Completed with_text = run_script(c, {0, 4, 1}, {.stop_token_ids = {4}, .include_stop_str_in_output = true});
  EXPECT_EQ(with_text.text, "Hel!");

  Completed eos = run_script(c, {0, 7, 1}, {.max_tokens = 10});
  EXPECT_EQ(eos.finish_reason, FinishReason::kStop);
  EXPECT_EQ(eos.stop_reason, StopReason());
  EXPECT_EQ(eos.token_ids, (std::vector<int32_t>{0, 7}));
  EXPECT_EQ(eos.text, "Hel");

  // min_tokens masks EOS: the second-best token comes instead and generation goes on.
  Completed min = run_script(c, {0, 7, 7, 7, 1}, {.min_tokens = 3, .max_tokens = 4});
  EXPECT_EQ(min.token_ids.size(), 4u);
  EXPECT_NE(min.token_ids[1], 7);
  EXPECT_NE(min.token_ids[2], 7);
  EXPECT_EQ(min.token_ids[3], 7);
  EXPECT_EQ(min.finish_reason, FinishReason::kLength) << "length is checked before EOS, as in vLLM";

  Completed ignore = run_script(c, {0, 7, 1, 2}, {.ignore_eos = true, .max_tokens = 4});
  EXPECT_EQ(ignore.token_ids, (std::vector<int32_t>{0, 7, 1, 2}));
  EXPECT_EQ(ignore.text, "Hello wor") << "EOS is a special token: skipped in the text";
  EXPECT_EQ(ignore.finish_reason, FinishReason::kLength);

  Completed special = run_script(c, {0, 7, 1, 2}, {.ignore_eos = true, .max_tokens = 4, .skip_special_tokens = false});
  EXPECT_EQ(special.text, "Hel<eos>lo wor");
}

TEST(ArEngineStopTest, StopStringsNeedADetokenizer) {
  FakeCausalLm model(kVocab, {kEos});
  ArEngine engine(model, config_with(16));
  try {
    engine.add_request({"r", {1, 2}, {.stop = {"x"}}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'stop'"), std::string::npos) << e.what();
  }
}

TEST(ArEngineTest, MaxModelLenEndsSequencesWithLength) {
  FakeCausalLm model(kVocab, {});
  ArEngine engine(model, config_with(8, 40));
  engine.add_request({"r", prompt_of(30, 1), {.temperature = 0}});
  Completed r = run_to_completion(engine).at({"r", 0});
  EXPECT_EQ(r.token_ids.size(), 10u);
  EXPECT_EQ(r.finish_reason, FinishReason::kLength);
}

TEST(ArEngineTest, RejectsBadRequestsNamingTheProblem) {
  FakeCausalLm model(kVocab, {kEos});
  ArEngine engine(model, config_with(16, 64));
  auto message = [&](EngineRequest r) { return testing::rejection(engine, std::move(r)); };
  EXPECT_NE(message({"a", {}, {}}).find("prompt is empty"), std::string::npos);
  EXPECT_NE(message({"b", {1, 97}, {}}).find("prompt token 97 (at index 1) is outside the vocabulary of 97"),
            std::string::npos);
  EXPECT_NE(message({"c", prompt_of(65, 1), {}}).find("longer than max_model_len (64)"), std::string::npos);
  EXPECT_NE(message({"d", {1}, {.logit_bias = {{200, 1.0f}}}}).find("logit_bias token 200"), std::string::npos);
  EXPECT_NE(message({"e", {1}, {.top_p = 0}}).find("'top_p'"), std::string::npos);
  EXPECT_EQ(message({"f", {1}, {}}), "accepted");
  EXPECT_NE(message({"f", {1}, {}}).find("request id 'f' is already in the engine"), std::string::npos);
}

TEST(ArEngineTest, SizesTheKvCacheFromTheBudgetOrTheOverride) {
  FakeCausalLm model(kVocab, {kEos}, 1024);  // 1024 bytes per block
  EngineConfig budget;
  budget.kv_cache_memory_bytes = 100 * 1024 + 500;
  ArEngine from_budget(model, budget);
  EXPECT_EQ(from_budget.config().num_blocks, 100);
  EXPECT_EQ(model.num_kv_blocks(), 100);
  EXPECT_EQ(from_budget.config().max_model_len, 1024);

  EngineConfig override_blocks = budget;
  override_blocks.num_gpu_blocks_override = 70;
  EXPECT_EQ(ArEngine(model, override_blocks).config().num_blocks, 70);

  EngineConfig small;
  small.kv_cache_memory_bytes = 10 * 1024;
  ArEngine lowered(model, small);
  EXPECT_EQ(lowered.config().max_model_len, 160) << "the model's 1024 positions do not fit 10 blocks";

  small.max_model_len = 500;
  try {
    ArEngine refused(model, small);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_NE(std::string(e.what()).find("cannot hold one sequence of max_model_len 500 (needs 32 blocks"),
              std::string::npos)
        << e.what();
  }

  EngineConfig unchunked = override_blocks;
  unchunked.enable_chunked_prefill = false;
  unchunked.max_num_batched_tokens = 512;
  try {
    ArEngine refused(model, unchunked);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_num_batched_tokens (512) is smaller than max_model_len (1024)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace omni::engine

namespace omni::engine {
namespace {

// A FakeCausalLm that counts how each step's tokens were picked.
class PathCountingLm : public testing::FakeCausalLm {
 public:
  using FakeCausalLm::FakeCausalLm;
  void forward_greedy(const model::ForwardBatch& batch, std::vector<int32_t>& token_ids) override {
    ++greedy_calls;
    FakeCausalLm::forward_greedy(batch, token_ids);
  }
  void forward_sample(const model::ForwardBatch& batch, std::span<const tensor::ops::SamplingParams> params,
                      std::vector<int32_t>& token_ids) override {
    ++sample_calls;
    FakeCausalLm::forward_sample(batch, params, token_ids);
  }
  int greedy_calls = 0;
  int sample_calls = 0;
};

// The host sampler (needed for logprobs, logit_bias and min_tokens) and ops::sample (the model's
// device; here the CPU twin) continue one Philox stream per sequence, so a seeded request gives the
// same tokens whichever path its steps take, and a request that only needs ops::sample never has
// its logits rows copied out.
TEST(ArEngineTest, SeededStreamsAreTheSameOnTheDeviceAndHostSamplingPaths) {
  const SamplingParams sampled{.temperature = 0.9f,
                               .top_p = 0.9f,
                               .top_k = 40,
                               .min_p = 0.02f,
                               .presence_penalty = 0.4f,
                               .frequency_penalty = 0.2f,
                               .repetition_penalty = 1.1f,
                               .seed = 21,
                               .ignore_eos = true,
                               .max_tokens = 30};
  auto run = [&](const SamplingParams& params, PathCountingLm& model) {
    ArEngine engine(model, config_with(64));
    engine.add_request({"r", prompt_of(23, 5), params});
    return run_to_completion(engine).at({"r", 0}).token_ids;
  };
  PathCountingLm device_model(kVocab, {kEos});
  const std::vector<int32_t> on_device = run(sampled, device_model);
  EXPECT_EQ(device_model.sample_calls, 30) << "every step samples through forward_sample";
  EXPECT_EQ(device_model.greedy_calls, 0);

  SamplingParams with_logprobs = sampled;
  with_logprobs.logprobs = 2;
  PathCountingLm host_model(kVocab, {kEos});
  EXPECT_EQ(run(with_logprobs, host_model), on_device);
  EXPECT_EQ(host_model.sample_calls, 0) << "logprobs need the rows on the host";

  // A zero bias changes no logit but needs the host sampler.
  SamplingParams biased = sampled;
  biased.logit_bias = {{3, 0.0f}};
  PathCountingLm biased_model(kVocab, {kEos});
  EXPECT_EQ(run(biased, biased_model), on_device);

  // min_tokens masks EOS for the first 5 tokens only, so the stream crosses from the host path to
  // the device path mid-request; it must go on as a request on the host path all along does.
  SamplingParams min_tokens = sampled;
  min_tokens.min_tokens = 5;
  min_tokens.ignore_eos = false;
  PathCountingLm mixed_model(kVocab, {kEos});
  const std::vector<int32_t> mixed = run(min_tokens, mixed_model);
  EXPECT_GT(mixed_model.sample_calls, 0);
  SamplingParams all_host = min_tokens;
  all_host.logprobs = 0;
  PathCountingLm host_only_model(kVocab, {kEos});
  EXPECT_EQ(run(all_host, host_only_model), mixed);
  EXPECT_EQ(host_only_model.sample_calls, 0);
}

}  // namespace
}  // namespace omni::engine

namespace omni::engine {
namespace {

TEST(ArEngineSleep, SleepFreesTheKvStorageRefusesWorkAndWakeUpGivesTheSameOutputs) {
  FakeCausalLm model(kVocab, {kEos});
  EngineConfig config = config_with(64);
  config.enable_prefix_caching = true;
  ArEngine engine(model, config);
  const std::vector<EngineRequest> requests = mixed_requests();
  for (const EngineRequest& r : requests) engine.add_request(r);
  const Results before = run_to_completion(engine);

  engine.add_request(requests[0]);
  EXPECT_THROW(engine.sleep(), Error) << "a request is unfinished";
  engine.abort(requests[0].request_id);
  engine.sleep();
  EXPECT_TRUE(engine.asleep());
  EXPECT_EQ(model.num_kv_blocks(), 0) << "the KV storage is freed";
  try {
    engine.add_request(requests[1]);
    ADD_FAILURE() << "an asleep engine took a request";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
  }
  engine.sleep();  // asleep already: nothing to do

  engine.wake_up();
  EXPECT_FALSE(engine.asleep());
  EXPECT_EQ(model.num_kv_blocks(), 64);
  EXPECT_EQ(engine.stats().num_free_blocks, 64) << "the prefix cache was forgotten with the storage";
  for (const EngineRequest& r : requests) engine.add_request(r);
  EXPECT_EQ(run_to_completion(engine), before);
}

}  // namespace
}  // namespace omni::engine
