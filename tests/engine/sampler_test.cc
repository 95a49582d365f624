#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "engine/logits_processors.h"
#include "tensor/ops.h"
#include "tensor/philox.h"

namespace omni::engine {
namespace {

std::vector<float> random_logits(int vocab, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(-5.0f, 5.0f);
  std::vector<float> logits(vocab);
  for (float& l : logits) l = dist(gen);
  return logits;
}

// vLLM's definitions written out directly, one vocabulary entry at a time.
std::vector<float> direct_penalties(std::vector<float> logits, const std::vector<int32_t>& prompt,
                                    const std::vector<int32_t>& output, float repetition, float frequency,
                                    float presence) {
  for (int v = 0; v < static_cast<int>(logits.size()); ++v) {
    bool in_prompt = std::count(prompt.begin(), prompt.end(), v) > 0;
    int in_output = static_cast<int>(std::count(output.begin(), output.end(), v));
    if (in_prompt || in_output > 0) logits[v] = logits[v] > 0 ? logits[v] / repetition : logits[v] * repetition;
    logits[v] -= frequency * static_cast<float>(in_output);
    logits[v] -= presence * (in_output > 0 ? 1.0f : 0.0f);
  }
  return logits;
}

TEST(LogitsProcessorsTest, PenaltiesMatchTheDirectDefinitionExactly) {
  std::vector<int32_t> prompt = {3, 3, 8, 15, 22, 8};
  std::vector<int32_t> output = {8, 30, 30, 30, 41, 3};
  PenaltyScratch scratch;
  for (auto [rep, freq, pres] : {std::tuple{1.3f, 0.0f, 0.0f}, std::tuple{1.0f, 0.7f, 0.0f},
                                 std::tuple{1.0f, 0.0f, -1.5f}, std::tuple{0.8f, -0.4f, 1.2f}}) {
    std::vector<float> logits = random_logits(50, 7);
    std::vector<float> expected = direct_penalties(logits, prompt, output, rep, freq, pres);
    apply_penalties(logits, prompt, output, rep, freq, pres, scratch);
    EXPECT_EQ(logits, expected) << "repetition " << rep << " frequency " << freq << " presence " << pres;
  }
  // The scratch is left clean for the next sequence: untouched tokens get no penalty.
  std::vector<float> logits = random_logits(50, 8);
  std::vector<float> before = logits;
  apply_penalties(logits, std::vector<int32_t>{1}, std::vector<int32_t>{}, 2.0f, 1.0f, 1.0f, scratch);
  for (int v = 2; v < 50; ++v) EXPECT_EQ(logits[v], before[v]) << v;
  EXPECT_EQ(logits[1], before[1] > 0 ? before[1] / 2.0f : before[1] * 2.0f);
}

TEST(LogitsProcessorsTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  std::vector<float> logits = {2.0f, -2.0f, 0.0f, 5.0f};
  PenaltyScratch scratch;
  apply_penalties(logits, std::vector<int32_t>{0, 1}, std::vector<int32_t>{2}, 2.0f, 0.0f, 0.0f, scratch);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -4.0f, 0.0f, 5.0f}));
}

TEST(LogitsProcessorsTest, LogitBiasAndMinTokens) {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 4.0f};
  apply_logit_bias(logits, {{0, 10.0f}, {3, -0.5f}});
  EXPECT_EQ(logits, (std::vector<float>{11.0f, 2.0f, 3.0f, 3.5f}));
  std::vector<int32_t> stops = {1, 2};
  apply_min_tokens(logits, 2, 2, stops);
  EXPECT_EQ(logits[1], 2.0f) << "min_tokens reached: no masking";
  apply_min_tokens(logits, 1, 2, stops);
  EXPECT_TRUE(std::isinf(logits[1]) && logits[1] < 0);
  EXPECT_TRUE(std::isinf(logits[2]) && logits[2] < 0);
  EXPECT_EQ(logits[0], 11.0f);
}

TEST(SamplerTest, GreedyPicksTheArgmaxOfBiasedThenPenalisedLogits) {
  Sampler sampler;
  SamplingRng rng(1);
  SamplingParams params;
  params.temperature = 0;
  params.logit_bias = {{4, 3.0f}, {9, -1.0f}};
  params.repetition_penalty = 1.7f;
  params.frequency_penalty = 0.3f;
  params.presence_penalty = 0.4f;
  params.min_tokens = 5;
  params = validated(params);
  std::vector<int32_t> prompt = {4, 9, 10};
  std::vector<int32_t> output = {11, 11, 4};
  std::vector<int32_t> stop_ids = {12};

  std::vector<float> logits = random_logits(40, 3);
  logits[12] = 100.0f;  // the stop token would win, but min_tokens is not reached
  std::vector<float> expected = logits;
  expected[12] = -std::numeric_limits<float>::infinity();
  expected[4] += 3.0f;  // bias first: it decides the sign the repetition penalty sees
  expected[9] += -1.0f;
  expected = direct_penalties(expected, prompt, output, 1.7f, 0.3f, 0.4f);

  SampledToken t = sampler.sample(logits, SamplingState{params, prompt, output, stop_ids, rng});
  EXPECT_EQ(logits, expected) << "sample() leaves the processed logits in the row";
  EXPECT_EQ(t.token_id, std::max_element(expected.begin(), expected.end()) - expected.begin());
}

TEST(SamplerTest, GreedyBreaksTiesTowardsTheLowestTokenId) {
  Sampler sampler;
  SamplingRng rng(1);
  SamplingParams params = validated(SamplingParams{.temperature = 0});
  std::vector<float> logits = {0.0f, 3.0f, 1.0f, 3.0f};
  EXPECT_EQ(sampler.sample(logits, SamplingState{params, {}, {}, {}, rng}).token_id, 1);
}

// Draws `n` tokens from `logits` with `params` and returns how often each token came.
std::map<int32_t, int> histogram(const std::vector<float>& logits, const SamplingParams& params, int n,
                                 uint64_t seed = 42) {
  Sampler sampler;
  SamplingRng rng(seed);
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) {
    std::vector<float> row = logits;
    ++counts[sampler.sample(row, SamplingState{params, {}, {}, {}, rng}).token_id];
  }
  return counts;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  double m = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double z = 0;
  for (size_t i = 0; i < logits.size(); ++i) z += p[i] = std::exp((logits[i] - m) / temperature);
  for (double& x : p) x /= z;
  return p;
}

TEST(SamplerTest, TemperatureSamplingFollowsTheSoftmax) {
  std::vector<float> logits = {1.0f, 2.0f, 0.5f, 3.0f, -1.0f};
  for (float temperature : {1.0f, 0.5f, 2.0f}) {
    SamplingParams params = validated(SamplingParams{.temperature = temperature});
    const int n = 40000;
    auto counts = histogram(logits, params, n);
    std::vector<double> p = softmax(logits, temperature);
    for (int v = 0; v < 5; ++v) {
      EXPECT_NEAR(counts[v] / double(n), p[v], 0.01) << "token " << v << " at temperature " << temperature;
    }
  }
}

TEST(SamplerTest, TopKKeepsTheKMostLikelyAndTheirTies) {
  std::vector<float> logits = {1.0f, 4.0f, 3.0f, 3.0f, 2.0f, 0.0f};
  auto counts = histogram(logits, validated(SamplingParams{.top_k = 2}), 5000);
  EXPECT_EQ(counts.size(), 3u) << "tokens 2 and 3 tie for second place";
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[2], 0);
  EXPECT_GT(counts[3], 0);

  auto one = histogram(logits, validated(SamplingParams{.top_k = 1}), 200);
  EXPECT_EQ(one, (std::map<int32_t, int>{{1, 200}}));
}

TEST(SamplerTest, TopPKeepsTokensWhileTheMassBeforeThemIsBelowP) {
  // Probabilities 0.5, 0.3, 0.15, 0.05.
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  auto kept = [&](float top_p) {
    std::set<int32_t> tokens;
    for (auto [t, c] : histogram(logits, validated(SamplingParams{.top_p = top_p}), 4000)) tokens.insert(t);
    return tokens;
  };
  EXPECT_EQ(kept(0.4f), (std::set<int32_t>{0}));
  EXPECT_EQ(kept(0.79f), (std::set<int32_t>{0, 1}));
  EXPECT_EQ(kept(0.81f), (std::set<int32_t>{0, 1, 2}));
  EXPECT_EQ(kept(0.96f), (std::set<int32_t>{0, 1, 2, 3}));

  // Renormalised over the nucleus {0, 1}: 0.625 / 0.375.
  const int n = 40000;
  auto counts = histogram(logits, validated(SamplingParams{.top_p = 0.7f}), n);
  EXPECT_NEAR(counts[0] / double(n), 0.625, 0.01);
  EXPECT_NEAR(counts[1] / double(n), 0.375, 0.01);
}

TEST(SamplerTest, TopPOverALargeVocabularyMatchesTheSortedNucleus) {
  // 3000 tokens: the nucleus is far larger than the first sorted head, so the head must grow.
  std::vector<float> logits = random_logits(3000, 11);
  const float top_p = 0.9f;
  std::vector<double> p = softmax(logits, 1.0);
  std::vector<int32_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  std::set<int32_t> nucleus;
  double before = 0;
  for (int32_t t : order) {
    if (before >= top_p) break;
    nucleus.insert(t);
    before += p[t];
  }
  ASSERT_GT(nucleus.size(), 256u);
  auto counts = histogram(logits, validated(SamplingParams{.top_p = top_p}), 4000);
  for (auto [t, c] : counts) EXPECT_TRUE(nucleus.count(t)) << "token " << t << " is outside the nucleus";
  // Tokens ranked beyond the first two sorted heads (64, 256) are drawn too.
  std::set<int32_t> deep(order.begin() + 256, order.begin() + nucleus.size());
  EXPECT_TRUE(std::any_of(counts.begin(), counts.end(), [&](auto& e) { return deep.count(e.first) > 0; }));
}

TEST(SamplerTest, MinPDropsTokensBelowAFractionOfTheMostLikely) {
  // Probabilities relative to the top: 1, 0.5, 0.2, 0.05.
  std::vector<float> logits = {0.0f, std::log(0.5f), std::log(0.2f), std::log(0.05f)};
  std::set<int32_t> seen;
  for (auto [t, c] : histogram(logits, validated(SamplingParams{.min_p = 0.1f}), 4000)) seen.insert(t);
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2}));
  seen.clear();
  for (auto [t, c] : histogram(logits, validated(SamplingParams{.min_p = 0.3f}), 4000)) seen.insert(t);
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
}

TEST(SamplerTest, ASeedDeterminesTheTokens) {
  std::vector<float> logits = random_logits(200, 5);
  SamplingParams params = validated(SamplingParams{.temperature = 1.0f, .top_p = 0.95f, .top_k = 50});
  auto draw = [&](uint64_t seed) {
    Sampler sampler;
    SamplingRng rng(seed);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 50; ++i) {
      std::vector<float> row = logits;
      tokens.push_back(sampler.sample(row, SamplingState{params, {}, {}, {}, rng}).token_id);
    }
    return tokens;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

TEST(SamplerTest, LogprobsAreTheRawLogSoftmaxWithRankAndTopTokens) {
  Sampler sampler;
  SamplingRng rng(3);
  SamplingParams params;
  params.temperature = 0;
  params.logprobs = 3;
  params.logit_bias = {{0, 50.0f}};  // makes token 0 the sampled one without changing raw logprobs
  params = validated(params);
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 3.0f, 2.0f};
  std::vector<double> p = softmax(logits, 1.0);
  std::vector<float> row = logits;
  SampledToken t = sampler.sample(row, SamplingState{params, {}, {}, {}, rng});
  EXPECT_EQ(t.token_id, 0);
  EXPECT_NEAR(t.logprob, std::log(p[0]), 1e-5);
  EXPECT_EQ(t.rank, 4) << "tokens 3, 1, 4 are more likely";
  ASSERT_EQ(t.top_logprobs.size(), 3u);
  EXPECT_EQ(t.top_logprobs[0].token_id, 3);
  EXPECT_EQ(t.top_logprobs[1].token_id, 1) << "ties keep the lower token id first";
  EXPECT_EQ(t.top_logprobs[2].token_id, 4);
  EXPECT_NEAR(t.top_logprobs[0].logprob, std::log(p[3]), 1e-5);
  EXPECT_NEAR(t.top_logprobs[1].logprob, std::log(p[1]), 1e-5);

  params.logprobs = 0;
  row = logits;
  SampledToken only = sampler.sample(row, SamplingState{params, {}, {}, {}, rng});
  EXPECT_TRUE(only.top_logprobs.empty());
  EXPECT_NEAR(only.logprob, std::log(p[0]), 1e-5);
}

// One definition of the draw: the engine's host sampler and ops::sample (the device sampler's CPU
// twin) give the same ids for the same logits, parameters, seed and step, penalties included.
TEST(SamplerTest, DrawsWhatOpsSampleDrawsForTheSameSeedAndStep) {
  const int vocab = 3000;
  const std::vector<int32_t> prompt = {5, 17, 17, 2999, 40};
  const std::vector<int32_t> output = {40, 41, 41, 7};
  struct Case {
    float temperature, top_p;
    int top_k;
    float min_p, repetition, presence, frequency;
  };
  int checked = 0;
  for (const Case c : {Case{1.0f, 1.0f, 0, 0.0f, 1.0f, 0.0f, 0.0f}, Case{0.7f, 0.9f, 0, 0.0f, 1.0f, 0.0f, 0.0f},
                       Case{1.3f, 1.0f, 50, 0.05f, 1.0f, 0.0f, 0.0f}, Case{0.8f, 0.95f, 200, 0.0f, 1.2f, 0.5f, 0.3f},
                       Case{1.0f, 0.5f, 0, 0.01f, 0.9f, -0.5f, 0.1f}, Case{0.0f, 1.0f, 0, 0.0f, 1.5f, 0.0f, 0.0f}}) {
    SamplingParams params = validated(SamplingParams{.temperature = c.temperature,
                                                     .top_p = c.top_p,
                                                     .top_k = c.top_k,
                                                     .min_p = c.min_p,
                                                     .presence_penalty = c.presence,
                                                     .frequency_penalty = c.frequency,
                                                     .repetition_penalty = c.repetition});
    for (uint64_t seed : {1u, 99u, 123456789u}) {
      SamplingRng rng(seed);
      for (int step = 0; step < 12; ++step) {
        std::vector<float> logits = random_logits(vocab, seed * 31 + step);
        tensor::Tensor row = tensor::Tensor::empty({1, vocab}, tensor::DType::kF32);
        std::copy(logits.begin(), logits.end(), row.data<float>());
        const tensor::ops::SamplingParams device = device_sampling_params(params, prompt, output, rng);
        EXPECT_EQ(device.step, static_cast<uint64_t>(params.greedy() ? 0 : step));
        tensor::Tensor id = tensor::Tensor::empty({1}, tensor::DType::kI32);
        tensor::ops::sample(row, std::span(&device, 1), id);
        Sampler sampler;
        const int32_t host = sampler.sample(logits, SamplingState{params, prompt, output, {}, rng}).token_id;
        EXPECT_EQ(host, id.data<int32_t>()[0]) << "temperature " << c.temperature << " top_p " << c.top_p << " top_k "
                                               << c.top_k << " seed " << seed << " step " << step;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 6 * 3 * 12);
}

TEST(SamplerTest, TheStreamIsPhiloxOfSeedAndStep) {
  SamplingRng rng(77);
  EXPECT_EQ(rng.uniform(), tensor::philox_uniform(77, 0));
  rng.skip();
  EXPECT_EQ(rng.step(), 2u);
  EXPECT_EQ(rng.uniform(), tensor::philox_uniform(77, 2));
}

}  // namespace
}  // namespace omni::engine
