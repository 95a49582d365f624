// A prompt with media through the ArEngine (model/causal_lm.h's prepare_multimodal_prompt): the
// model's expansion becomes the prompt (its length is what the output reports), every media row
// reaches the forward once, at its position, also when the prompt is prefilled in chunks, and no
// block of such a prompt is prefix-cached.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/ar_engine.h"
#include "engine_test_util.h"
#include "fake_causal_lm.h"

namespace omni::engine {
namespace {

using testing::FakeCausalLm;

constexpr int32_t kPlaceholder = 7;
constexpr int kRowsPerMedia = 20;
constexpr int kHidden = 2;

// Expands each placeholder to kRowsPerMedia copies; row r of media m holds {m, r}. Records, per
// prompt position, the rows the forwards received there.
class MediaLm : public FakeCausalLm {
 public:
  MediaLm() : FakeCausalLm(97, {}) {}

  std::optional<model::MultimodalPrompt> prepare_multimodal_prompt(std::span<const int32_t> prompt,
                                                                   const Json& info) override {
    if (!info.contains(model::kMultiModalData)) return std::nullopt;
    model::MultimodalPrompt out;
    int media = 0;
    for (int32_t id : prompt) {
      if (id != kPlaceholder) {
        out.token_ids.push_back(id);
        continue;
      }
      for (int r = 0; r < kRowsPerMedia; ++r) {
        out.rows.push_back(static_cast<int32_t>(out.token_ids.size()));
        out.token_ids.push_back(kPlaceholder);
        out.values.insert(out.values.end(), {static_cast<float>(media), static_cast<float>(r)});
      }
      ++media;
    }
    return out;
  }

  void forward(const model::ForwardBatch& batch, std::vector<float>& logits) override {
    for (size_t i = 0; i < batch.input_rows.size(); ++i) {
      const int32_t row = batch.input_rows[i];
      for (const model::SequenceSlice& s : batch.seqs) {
        if (row >= s.query_start && row < s.query_start + s.query_len) {
          received[s.context_len + (row - s.query_start)].push_back(
              {batch.input_row_values[i * kHidden], batch.input_row_values[i * kHidden + 1]});
        }
      }
    }
    FakeCausalLm::forward(batch, logits);
  }

  std::map<int, std::vector<std::pair<float, float>>> received;  // prompt position -> rows seen there
};

EngineRequest media_request(const std::string& id, std::vector<int32_t> prompt) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.sampling_params.max_tokens = 3;
  r.sampling_params.temperature = 0.0f;
  r.additional_information = {{model::kMultiModalData, {{"audio", Json::array({{}, {}})}}}};
  return r;
}

TEST(MediaPromptEngine, RowsReachTheirPositionsAcrossChunksAndThePromptIsExpanded) {
  MediaLm model;
  EngineConfig config;
  config.num_gpu_blocks_override = 64;
  config.max_model_len = 256;
  config.max_num_batched_tokens = 16;  // the 45-token prompt takes 3 chunks
  config.max_num_seqs = 4;
  config.enable_prefix_caching = true;
  ArEngine engine(model, config);
  const std::vector<int32_t> prompt{1, 2, kPlaceholder, 3, 4, kPlaceholder, 5};
  engine.add_request(media_request("a", prompt));
  int reported = 0;
  for (int i = 0; i < 100 && engine.has_unfinished_requests(); ++i) {
    for (const RequestOutput& out : engine.step()) reported = out.num_prompt_tokens;
  }
  EXPECT_EQ(reported, 7 - 2 + 2 * kRowsPerMedia);
  ASSERT_EQ(model.received.size(), static_cast<size_t>(2 * kRowsPerMedia));
  for (int m = 0; m < 2; ++m) {
    for (int r = 0; r < kRowsPerMedia; ++r) {
      const int position = 2 + m * (kRowsPerMedia + 2) + r;
      ASSERT_EQ(model.received[position].size(), 1u) << "position " << position;
      EXPECT_EQ(model.received[position][0], std::make_pair(static_cast<float>(m), static_cast<float>(r)));
    }
  }
  bool chunked = false;
  for (const FakeCausalLm::Batch& batch : model.batches()) {
    for (const auto& s : batch) chunked |= !s.wants_logits;
  }
  EXPECT_TRUE(chunked) << "the prompt was prefilled in chunks";

  // The same ids with other media: nothing of the first prompt's KV may be reused.
  engine.add_request(media_request("b", prompt));
  testing::run_to_completion(engine);
  EXPECT_EQ(engine.stats().prefix_cache.hit_blocks, 0u);
}

TEST(MediaPromptEngine, TheExpandedPromptMustFitMaxModelLen) {
  MediaLm model;
  EngineConfig config;
  config.num_gpu_blocks_override = 64;
  config.max_model_len = 40;
  ArEngine engine(model, config);
  const std::string refused = testing::rejection(engine, media_request("a", {1, kPlaceholder, kPlaceholder}));
  EXPECT_NE(refused.find("the prompt with its media (41 tokens) is longer than max_model_len (40)"), std::string::npos)
      << refused;
}

TEST(MediaPromptEngine, AModelThatReadsNoMediaRefusesThemNamingTheSource) {
  FakeCausalLm model(97, {});
  EngineConfig config;
  config.num_gpu_blocks_override = 16;
  config.max_model_len = 64;
  ArEngine engine(model, config);
  EngineRequest r = media_request("a", {1, 2});
  r.additional_information = {{model::kMultiModalData, {{"audio", {{{"source", "messages[0].content[1]"}}}}}}};
  const std::string refused = testing::rejection(engine, r);
  EXPECT_NE(refused.find("'messages[0].content[1]': the served model reads no audio input"), std::string::npos)
      << refused;
}

}  // namespace
}  // namespace omni::engine
