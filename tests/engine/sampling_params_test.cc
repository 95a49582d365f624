#include "engine/sampling_params.h"

#include <gtest/gtest.h>

#include <functional>

#include "base/error.h"

namespace omni::engine {
namespace {

// Expects validated() to reject `params` with a message naming `field`.
void expect_rejected(SamplingParams params, const std::string& field, const std::string& rule) {
  try {
    validated(params);
    ADD_FAILURE() << field << " was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    std::string what = e.what();
    EXPECT_NE(what.find("'" + field + "'"), std::string::npos) << what;
    EXPECT_NE(what.find(rule), std::string::npos) << what;
  }
}

template <typename F>
SamplingParams with(F set) {
  SamplingParams p;
  set(p);
  return p;
}

TEST(SamplingParamsTest, RejectsWhatVllmRejectsNamingTheParameter) {
  expect_rejected(with([](auto& p) { p.n = 0; }), "n", "in [1, 128]");
  expect_rejected(with([](auto& p) { p.n = 100000; }), "n", "in [1, 128]");
  expect_rejected(with([](auto& p) { p.stop.assign(65, "x"); }), "stop", "at most 64 strings");
  expect_rejected(with([](auto& p) { p.stop = {std::string(1025, 'x')}; }), "stop", "at most 1024 bytes");
  expect_rejected(with([](auto& p) { p.temperature = -0.5f; }), "temperature", ">= 0");
  expect_rejected(with([](auto& p) { p.top_p = 0.0f; }), "top_p", "(0, 1]");
  expect_rejected(with([](auto& p) { p.top_p = 1.5f; }), "top_p", "(0, 1]");
  expect_rejected(with([](auto& p) { p.top_k = -2; }), "top_k", "-1 or 0");
  expect_rejected(with([](auto& p) { p.min_p = 1.1f; }), "min_p", "[0, 1]");
  expect_rejected(with([](auto& p) { p.presence_penalty = 2.5f; }), "presence_penalty", "[-2, 2]");
  expect_rejected(with([](auto& p) { p.frequency_penalty = -2.5f; }), "frequency_penalty", "[-2, 2]");
  expect_rejected(with([](auto& p) { p.repetition_penalty = 0.0f; }), "repetition_penalty", "> 0");
  expect_rejected(with([](auto& p) { p.max_tokens = 0; }), "max_tokens", "at least 1");
  expect_rejected(with([](auto& p) { p.min_tokens = -1; }), "min_tokens", ">= 0");
  expect_rejected(with([](auto& p) {
                    p.max_tokens = 4;
                    p.min_tokens = 5;
                  }),
                  "min_tokens", "<= max_tokens (4)");
  expect_rejected(with([](auto& p) { p.logprobs = 21; }), "logprobs", "[0, 20]");
  expect_rejected(with([](auto& p) { p.logprobs = -1; }), "logprobs", "[0, 20]");
  expect_rejected(with([](auto& p) { p.stop = {"ok", ""}; }), "stop", "non-empty");
  expect_rejected(with([](auto& p) { p.temperature = std::nanf(""); }), "temperature", ">= 0");
}

TEST(SamplingParamsTest, AcceptsTheBoundsThemselves) {
  SamplingParams p = validated(with([](auto& q) {
    q.n = 128;
    q.stop.assign(64, std::string(1024, 'x'));
  }));
  EXPECT_EQ(p.n, 128);
  EXPECT_EQ(p.stop.size(), 64u);
}

TEST(SamplingParamsTest, NormalisesLikeVllm) {
  SamplingParams greedy = validated(with([](auto& p) {
    p.temperature = 0.0f;
    p.top_p = 0.5f;
    p.top_k = 3;
    p.min_p = 0.2f;
  }));
  EXPECT_TRUE(greedy.greedy());
  EXPECT_EQ(greedy.top_p, 1.0f);
  EXPECT_EQ(greedy.top_k, 0);
  EXPECT_EQ(greedy.min_p, 0.0f);

  EXPECT_EQ(validated(with([](auto& p) { p.temperature = 0.001f; })).temperature, kMinTemperature);
  EXPECT_EQ(validated(with([](auto& p) { p.top_k = -1; })).top_k, 0);
  SamplingParams edge = validated(with([](auto& p) {
    p.top_p = 1.0f;
    p.min_p = 1.0f;
    p.presence_penalty = -2.0f;
    p.logprobs = 20;
    p.max_tokens = 3;
    p.min_tokens = 3;
  }));
  EXPECT_EQ(edge.logprobs, 20);
}

TEST(SamplingParamsTest, ReadsVllmFieldNamesFromJson) {
  SamplingParams base;
  base.temperature = 0.0f;
  base.max_tokens = 8;
  Json j = Json::parse(R"({
    "n": 2, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": -0.25,
    "repetition_penalty": 1.1, "logit_bias": {"5": 2.5, "17": -100}, "seed": -3, "stop": "END",
    "stop_token_ids": [7, 9], "include_stop_str_in_output": true, "ignore_eos": true, "min_tokens": 2,
    "max_tokens": null, "logprobs": 3, "skip_special_tokens": false})");
  SamplingParams p = sampling_params_from_json(j, base, "prompts.jsonl:4");
  EXPECT_EQ(p.n, 2);
  EXPECT_EQ(p.temperature, 0.0f) << "absent fields keep the base value";
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_FLOAT_EQ(p.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(p.frequency_penalty, -0.25f);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.1f);
  EXPECT_EQ(p.logit_bias, (std::map<int32_t, float>{{5, 2.5f}, {17, -100.0f}}));
  EXPECT_EQ(p.seed, -3);
  EXPECT_EQ(p.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{7, 9}));
  EXPECT_TRUE(p.include_stop_str_in_output);
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.min_tokens, 2);
  EXPECT_EQ(p.max_tokens, std::nullopt) << "null restores the default";
  EXPECT_EQ(p.logprobs, 3);
  EXPECT_FALSE(p.skip_special_tokens);

  EXPECT_EQ(sampling_params_from_json(Json::parse(R"({"stop": ["a", "bc"]})"), base, "x").stop,
            (std::vector<std::string>{"a", "bc"}));
}

TEST(SamplingParamsTest, JsonErrorsNameTheSourceAndField) {
  auto message = [](const char* text) {
    try {
      sampling_params_from_json(Json::parse(text), SamplingParams{}, "prompts.jsonl:2");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message(R"({"temprature": 0})").rfind("prompts.jsonl:2: unknown sampling parameter 'temprature'", 0), 0u);
  EXPECT_NE(message(R"({"top_k": 1.5})").find("'top_k' must be an integer, got 1.5"), std::string::npos);
  EXPECT_NE(message(R"({"stop": [1]})").find("'stop' must be a string or a list of strings"), std::string::npos);
  EXPECT_NE(message(R"({"logit_bias": {"x": 1}})").find("'logit_bias' has key \"x\""), std::string::npos);
  EXPECT_NE(message(R"({"ignore_eos": 1})").find("'ignore_eos' must be true or false"), std::string::npos);
  EXPECT_NE(message(R"({"max_tokens": 99999999999})").find("'max_tokens' must be in range"), std::string::npos);
}

}  // namespace
}  // namespace omni::engine
