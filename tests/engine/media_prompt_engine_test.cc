// A prompt with media through the ArEngine (model/causal_lm.h's prepare_multimodal_prompt): the
// model's expansion becomes the prompt (its length is what the output reports), every media row
// reaches the forward once, at its position, also when the prompt is prefilled in chunks, and no
// block of such a prompt is prefix-cached; a prompt's own M-RoPE streams and DeepStack rows reach
// every chunk, and its generated tokens take position + rope delta on all three streams.
#include <gtest/gtest.h>

#include <array>
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

// MediaLm whose prompts also carry three position streams (t = 1000 + p, h = 2000 + p, w = 3000 + p
// at prompt position p), a rope delta of 500 and one DeepStack level ({-m, -r} per row). Records
// the three streams of every token it is given, and the DeepStack row each media row came with.
class GridMediaLm : public MediaLm {
 public:
  std::optional<model::MultimodalPrompt> prepare_multimodal_prompt(std::span<const int32_t> prompt,
                                                                   const Json& info) override {
    std::optional<model::MultimodalPrompt> out = MediaLm::prepare_multimodal_prompt(prompt, info);
    if (!out) return out;
    const size_t n = out->token_ids.size();
    for (int stream = 0; stream < 3; ++stream) {
      for (size_t p = 0; p < n; ++p)
        out->mrope_positions.push_back(static_cast<float>(1000 * (stream + 1) + static_cast<int32_t>(p)));
    }
    out->rope_delta = 500.0f;
    out->deepstack.resize(1);
    for (size_t i = 0; i < out->values.size(); ++i) out->deepstack[0].push_back(-out->values[i]);
    return out;
  }

  void forward(const model::ForwardBatch& batch, std::vector<float>& logits) override {
    const size_t tokens = batch.positions.size();
    for (const model::SequenceSlice& s : batch.seqs) {
      for (int i = 0; i < s.query_len; ++i) {
        const size_t t = static_cast<size_t>(s.query_start + i);
        std::array<int32_t, 3> streams{batch.positions[t], batch.positions[t], batch.positions[t]};
        if (!batch.mrope_positions.empty()) {
          for (int k = 0; k < 3; ++k) streams[k] = static_cast<int32_t>(batch.mrope_positions[k * tokens + t]);
        }
        positions_seen[s.block_table.front()][s.context_len + i] = streams;
      }
    }
    for (size_t i = 0; i < batch.input_rows.size(); ++i) {
      ASSERT_EQ(batch.input_row_deepstack.size(), 1u);
      deepstack_seen.push_back({batch.input_row_values[i * kHidden] + batch.input_row_deepstack[0][i * kHidden],
                                batch.input_row_values[i * kHidden + 1] + batch.input_row_deepstack[0][i * kHidden + 1]});
    }
    MediaLm::forward(batch, logits);
  }

  // first block of the sequence -> index -> its (t, h, w)
  std::map<int32_t, std::map<int, std::array<int32_t, 3>>> positions_seen;
  std::vector<std::pair<float, float>> deepstack_seen;  // value + DeepStack value of every row given
};

TEST(MediaPromptEngine, GridPositionsAndDeepStackRowsReachEveryChunkAndDecodeAddsTheRopeDelta) {
  GridMediaLm model;
  EngineConfig config;
  config.num_gpu_blocks_override = 64;
  config.max_model_len = 256;
  config.max_num_batched_tokens = 16;
  config.max_num_seqs = 4;
  ArEngine engine(model, config);
  const std::vector<int32_t> prompt{1, 2, kPlaceholder, 3};
  engine.add_request(media_request("grid", prompt));
  EngineRequest text;  // a text request in the same batches keeps its plain positions
  text.request_id = "text";
  text.prompt_token_ids = {4, 5, 6};
  text.sampling_params.max_tokens = 3;
  text.sampling_params.temperature = 0.0f;
  engine.add_request(text);
  testing::run_to_completion(engine);

  const int n = 4 - 1 + kRowsPerMedia;  // the expanded prompt
  ASSERT_EQ(model.positions_seen.size(), 2u);
  bool found_grid = false, found_text = false;
  for (const auto& [block, seen] : model.positions_seen) {
    if (seen.size() == static_cast<size_t>(n + 2)) {  // the media prompt: n prompt tokens, 2 decoded
      found_grid = true;
      for (int p = 0; p < n; ++p) {
        EXPECT_EQ(seen.at(p), (std::array<int32_t, 3>{1000 + p, 2000 + p, 3000 + p})) << "prompt position " << p;
      }
      for (int p = n; p < n + 2; ++p) {
        EXPECT_EQ(seen.at(p), (std::array<int32_t, 3>{p + 500, p + 500, p + 500})) << "decoded index " << p;
      }
    } else {
      found_text = true;
      for (const auto& [p, streams] : seen) EXPECT_EQ(streams, (std::array<int32_t, 3>{p, p, p}));
    }
  }
  EXPECT_TRUE(found_grid && found_text);
  // Every media row came with its DeepStack row (value + DeepStack = 0).
  ASSERT_EQ(model.deepstack_seen.size(), static_cast<size_t>(kRowsPerMedia));
  for (const auto& [a, b] : model.deepstack_seen) EXPECT_EQ(std::make_pair(a, b), std::make_pair(0.0f, 0.0f));
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
