// ArEngine with a text model that gives rows to a downstream stage (CausalLm::downstream_layer, as
// the Qwen3-Omni thinker gives its talker): a request that feeds one gets, with each sampled token,
// the payload of exactly the rows computed since the previous one (the whole prompt with the first
// token, even when chunked prefill splits it; then the fed token's row), rows computed again after
// a preemption are not sent twice, such a request never takes prefix-cache blocks, and a request
// that feeds no stage gets no payloads. Its tokens are those of the same request without rows.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/ar_engine.h"
#include "engine_test_util.h"
#include "fake_causal_lm.h"

namespace omni::engine {
namespace {

using testing::FakeCausalLm;

constexpr int kVocab = 97;
constexpr int kHidden = 2;

// The capture of a row: embedding (token, position), hidden (layer, token). A payload is the
// int32s [first_position, prompt_length, count, ids..., embeddings as int...].
class RowsLm final : public FakeCausalLm {
 public:
  RowsLm() : FakeCausalLm(kVocab, {}) {}
  std::optional<int> downstream_layer() const override { return 3; }
  void forward(const model::ForwardBatch& batch, std::vector<float>& logits) override {
    FakeCausalLm::forward(batch, logits);
    if (batch.capture == nullptr) return;
    ++captured_steps;
    batch.capture->embeddings.clear();
    batch.capture->hidden.clear();
    for (size_t i = 0; i < batch.token_ids.size(); ++i) {
      batch.capture->embeddings.insert(batch.capture->embeddings.end(), {static_cast<float>(batch.token_ids[i]),
                                                                         static_cast<float>(batch.positions[i])});
      batch.capture->hidden.insert(batch.capture->hidden.end(),
                                   {static_cast<float>(batch.capture->layer), static_cast<float>(batch.token_ids[i])});
    }
  }
  std::vector<uint8_t> encode_downstream_rows(const model::DownstreamRows& rows) const override {
    EXPECT_EQ(rows.hidden_size, kHidden);
    std::vector<int32_t> words = {rows.first_position, rows.prompt_length, static_cast<int32_t>(rows.token_ids.size())};
    for (size_t i = 0; i < rows.token_ids.size(); ++i) {
      words.push_back(rows.token_ids[i]);
      EXPECT_EQ(rows.embeddings[i * kHidden], static_cast<float>(rows.token_ids[i]));
      EXPECT_EQ(rows.embeddings[i * kHidden + 1], static_cast<float>(rows.first_position + static_cast<int>(i)));
      EXPECT_EQ(rows.hidden[i * kHidden], 3.0f);
      EXPECT_EQ(rows.hidden[i * kHidden + 1], static_cast<float>(rows.token_ids[i]));
    }
    std::vector<uint8_t> bytes(words.size() * sizeof(int32_t));
    std::memcpy(bytes.data(), words.data(), bytes.size());
    return bytes;
  }
  int captured_steps = 0;
};

struct Payload {
  int32_t first_position = 0;
  int32_t prompt_length = 0;
  std::vector<int32_t> ids;
};

Payload decode(const std::vector<uint8_t>& bytes) {
  std::vector<int32_t> words(bytes.size() / sizeof(int32_t));
  std::memcpy(words.data(), bytes.data(), words.size() * sizeof(int32_t));
  Payload p;
  p.first_position = words.at(0);
  p.prompt_length = words.at(1);
  p.ids.assign(words.begin() + 3, words.end());
  EXPECT_EQ(static_cast<size_t>(words.at(2)), p.ids.size());
  return p;
}

struct Stream {
  std::vector<int32_t> tokens;
  std::vector<std::vector<uint8_t>> payloads;
};

std::map<std::string, Stream> run(ArEngine& engine) {
  std::map<std::string, Stream> streams;
  for (int i = 0; i < 2000 && engine.has_unfinished_requests(); ++i) {
    for (const RequestOutput& out : engine.step()) {
      for (const CompletionOutput& c : out.completions) {
        Stream& s = streams[out.request_id];
        s.tokens.insert(s.tokens.end(), c.token_ids.begin(), c.token_ids.end());
        s.payloads.insert(s.payloads.end(), c.step_outputs.begin(), c.step_outputs.end());
      }
    }
  }
  return streams;
}

EngineRequest request(const std::string& id, std::vector<int32_t> prompt, int max_tokens, bool feeds) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.sampling_params = {.temperature = 0, .max_tokens = max_tokens};
  r.feeds_downstream = feeds;
  return r;
}

// The payloads of a request cover its prompt and every output but the last, once each, in order.
void expect_rows_of(const Stream& s, const std::vector<int32_t>& prompt, const std::string& id) {
  ASSERT_EQ(s.payloads.size(), s.tokens.size()) << id;
  std::vector<int32_t> history = prompt;
  history.insert(history.end(), s.tokens.begin(), s.tokens.end());
  int32_t next = 0;
  for (size_t i = 0; i < s.payloads.size(); ++i) {
    const Payload p = decode(s.payloads[i]);
    EXPECT_EQ(p.first_position, next) << id << " token " << i;
    EXPECT_EQ(p.prompt_length, static_cast<int32_t>(prompt.size())) << id;
    ASSERT_FALSE(p.ids.empty()) << id << " token " << i;
    for (size_t k = 0; k < p.ids.size(); ++k) EXPECT_EQ(p.ids[k], history.at(next + k)) << id << " token " << i;
    next += static_cast<int32_t>(p.ids.size());
    // The first token comes with the whole prompt, each later one with the row of the token before it.
    EXPECT_EQ(next, static_cast<int32_t>(prompt.size() + i)) << id << " token " << i;
  }
}

TEST(DownstreamRowsEngine, EachTokenCarriesTheRowsComputedSinceThePreviousOne) {
  const std::vector<int32_t> long_prompt = testing::random_prompt(40, 3, kVocab - 1);
  const std::vector<int32_t> short_prompt = testing::random_prompt(5, 4, kVocab - 1);
  RowsLm model;
  // 16 tokens a step: the long prompt is prefilled in three chunks.
  ArEngine engine(model, {.max_num_seqs = 4,
                          .max_num_batched_tokens = 16,
                          .enable_chunked_prefill = true,
                          .enable_prefix_caching = true,
                          .num_gpu_blocks_override = 64});
  engine.add_request(request("long", long_prompt, 6, true));
  engine.add_request(request("short", short_prompt, 4, true));
  engine.add_request(request("text", long_prompt, 6, false));
  std::map<std::string, Stream> streams = run(engine);
  expect_rows_of(streams["long"], long_prompt, "long");
  expect_rows_of(streams["short"], short_prompt, "short");
  EXPECT_TRUE(streams["text"].payloads.empty()) << "a request no stage reads has no payloads";
  EXPECT_EQ(streams["text"].tokens, streams["long"].tokens) << "the rows change nothing generated";
  EXPECT_GT(model.captured_steps, 0);
  // The request that feeds a stage neither takes nor leaves prefix-cache blocks: "text" found none.
  EXPECT_EQ(engine.stats().prefix_cache.hit_blocks, 0u);
}

TEST(DownstreamRowsEngine, RowsComputedAgainAfterAPreemptionAreNotSentTwice) {
  // 4 blocks of 16 for two requests that need 3 each: the newer one is preempted and recomputed.
  const std::vector<int32_t> a = testing::random_prompt(30, 5, kVocab - 1);
  const std::vector<int32_t> b = testing::random_prompt(30, 6, kVocab - 1);
  RowsLm model;
  ArEngine engine(model, {.max_num_seqs = 4, .enable_prefix_caching = false, .num_gpu_blocks_override = 5});
  engine.add_request(request("a", a, 20, true));
  engine.add_request(request("b", b, 20, true));
  std::map<std::string, Stream> streams = run(engine);
  EXPECT_GT(engine.stats().num_preemptions, 0u);
  expect_rows_of(streams["a"], a, "a");
  expect_rows_of(streams["b"], b, "b");
}

TEST(DownstreamRowsEngine, AModelWithoutRowsOrSeveralChoicesFeedNothing) {
  FakeCausalLm plain(kVocab, {});
  ArEngine engine(plain, {.max_num_seqs = 2, .num_gpu_blocks_override = 16});
  engine.add_request(request("plain", {1, 2, 3}, 3, true));
  std::map<std::string, Stream> streams = run(engine);
  EXPECT_EQ(streams["plain"].tokens.size(), 3u);
  EXPECT_TRUE(streams["plain"].payloads.empty());

  RowsLm model;
  ArEngine rows(model, {.max_num_seqs = 2, .num_gpu_blocks_override = 16});
  EngineRequest several = request("n2", {1, 2, 3}, 3, true);
  several.sampling_params.n = 2;
  EXPECT_THROW(rows.add_request(std::move(several)), Error);
}

}  // namespace
}  // namespace omni::engine
