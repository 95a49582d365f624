// The Qwen3-Omni talker's configuration and the Qwen3-TTS talker machinery on its checkpoint
// layout (model/qwen3_omni/talker_config.h), on the demo checkpoint of
// model/qwen3_omni/random_checkpoint.h: what the config says, that the stack (MoE with a shared
// expert), the projections of thinker rows, the codec head and the code predictor load from the
// released names and compute consistently (a chunked prefill equals the whole one, the projections
// are the documented MLP), and the config's errors. Its numbers against transformers are
// scripts/reference/qwen3_omni_speech_reference.py's (not yet run).
#include "model/qwen3_omni/talker_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"
#include "model/qwen3_omni/code2wav.h"
#include "model/qwen3_omni/random_checkpoint.h"
#include "model/qwen3_tts/talker.h"
#include "model/safetensors.h"
#include "support/temp_dir.h"

namespace omni::model::qwen3_omni {
namespace {

namespace fs = std::filesystem;
using tensor::DType;
using tensor::Tensor;

// The demo checkpoint, written once (float32).
const fs::path& demo_dir() {
  static testing::TempDir* dir = [] {
    auto* d = new testing::TempDir;
    write_random_checkpoint(d->path(), demo_thinker_shapes(), 7, DType::kF32, OMNI_QWEN3_TOKENIZER_DIR, true);
    return d;
  }();
  return dir->path();
}

TEST(Qwen3OmniTalkerTest, ConfigReadsTheStacksIdsAndSpeakers) {
  const TalkerConfig c = read_talker_config(demo_dir());
  EXPECT_EQ(c.talker.talker.vocab_size, 3072);
  EXPECT_EQ(c.talker.talker.moe.num_experts, 8);
  EXPECT_EQ(c.talker.talker.moe.shared_expert_intermediate_size, 64);
  EXPECT_EQ(c.talker.talker.rope.mrope_section, (std::vector<int>{8, 4, 4}));
  EXPECT_EQ(c.talker.code_predictor.vocab_size, 2048);
  EXPECT_EQ(c.talker.num_code_groups, 16);
  EXPECT_EQ(c.talker.text_vocab_size, 0);
  EXPECT_EQ(c.talker.text_hidden_size, demo_thinker_shapes().hidden_size);
  EXPECT_EQ(c.talker.projection_size, 128);
  EXPECT_EQ(c.talker.codec_eos_id, 2150);
  EXPECT_EQ(c.talker.codec_think_eos_id, 2157);
  EXPECT_EQ(c.talker.speaker_id("Ethan"), 2302);
  EXPECT_EQ(c.talker.speaker_names(), (std::vector<std::string>{"aiden", "chelsie", "ethan"}));
  EXPECT_EQ(c.accept_hidden_layer, 1);
  EXPECT_EQ(c.talker.tts_bos_token_id, 151672);
}

TEST(Qwen3OmniTalkerTest, LoadsAndComputesOnTheReleasedLayout) {
  const TalkerConfig c = read_talker_config(demo_dir());
  qwen3_tts::Talker talker(demo_dir(), c.talker);
  const int64_t h = talker.hidden_size(), thinker_h = c.talker.text_hidden_size;

  // text_projection of thinker rows: fc2(SiLU(fc1(x))), with biases.
  std::vector<float> x(static_cast<size_t>(3 * thinker_h));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  const Tensor rows = Tensor::borrow(x.data(), {3, thinker_h}, DType::kF32);
  const Tensor projected = talker.project_rows(rows, qwen3_tts::Talker::Projection::kText);
  ASSERT_EQ(projected.shape(), (tensor::Shape{3, h}));
  const Checkpoint ckpt = Checkpoint::open(demo_dir());
  const int64_t inner = c.talker.projection_size;
  const Tensor w1 = ckpt.load_f32("talker.text_projection.linear_fc1.weight", {inner, thinker_h});
  const Tensor b1 = ckpt.load_f32("talker.text_projection.linear_fc1.bias", {inner});
  const Tensor w2 = ckpt.load_f32("talker.text_projection.linear_fc2.weight", {h, inner});
  const Tensor b2 = ckpt.load_f32("talker.text_projection.linear_fc2.bias", {h});
  for (int r = 0; r < 3; ++r) {
    std::vector<double> a(static_cast<size_t>(inner));
    for (int64_t j = 0; j < inner; ++j) {
      double s = b1.data<float>()[j];
      for (int64_t i = 0; i < thinker_h; ++i) s += double{w1.data<float>()[j * thinker_h + i]} * x[r * thinker_h + i];
      a[j] = s / (1.0 + std::exp(-s));
    }
    for (int64_t o = 0; o < h; ++o) {
      double s = b2.data<float>()[o];
      for (int64_t j = 0; j < inner; ++j) s += double{w2.data<float>()[o * inner + j]} * a[j];
      ASSERT_NEAR(projected.data<float>()[r * h + o], s, 1e-5 * (1.0 + std::abs(s))) << "row " << r << " col " << o;
    }
  }
  const Tensor hidden_rows = talker.project_rows(rows, qwen3_tts::Talker::Projection::kHidden);
  EXPECT_NE(std::vector<float>(hidden_rows.data<float>(), hidden_rows.data<float>() + h),
            std::vector<float>(projected.data<float>(), projected.data<float>() + h));
  EXPECT_THROW(talker.project_text(std::vector<int32_t>{1, 2}), Error);  // no text embedding of its own
  EXPECT_THROW(talker.project_rows(Tensor::zeros({2, thinker_h + 1}, DType::kF32),
                                   qwen3_tts::Talker::Projection::kText),
               Error);

  // The MoE stack: a prompt of 12 rows at once equals the same rows in chunks of 5 and 7 through
  // the paged cache.
  std::vector<float> prompt(static_cast<size_t>(12 * h), 0.0f);
  for (int r = 0; r < 12; ++r) talker.add_codec_embedding(2148 + r % 10, prompt.data() + r * h);
  auto run = [&](const std::vector<std::pair<int, int>>& chunks) {
    talker.init_kv_cache(4);
    std::vector<float> all_logits, logits;
    Tensor hidden;
    for (const auto& [begin, n] : chunks) {
      ForwardBatch batch;
      batch.all_logits = true;
      for (int i = 0; i < n; ++i) batch.positions.push_back(begin + i);
      batch.seqs.push_back({0, n, begin, {0}, true});
      Tensor part = Tensor::empty({n, h}, DType::kF32);
      std::copy_n(prompt.data() + begin * h, n * h, part.data<float>());
      talker.forward(batch, part, logits, hidden);
      all_logits.insert(all_logits.end(), logits.begin(), logits.end());
    }
    return all_logits;
  };
  const std::vector<float> whole = run({{0, 12}});
  const std::vector<float> chunked = run({{0, 5}, {5, 7}});
  ASSERT_EQ(whole.size(), static_cast<size_t>(12 * talker.codec_vocab_size()));
  ASSERT_EQ(chunked.size(), whole.size());
  double worst = 0.0, peak = 0.0;
  for (size_t i = 0; i < whole.size(); ++i) {
    worst = std::max(worst, std::abs(double{whole[i]} - chunked[i]));
    peak = std::max(peak, std::abs(double{whole[i]}));
  }
  EXPECT_LT(worst, 1e-5 * peak);
  EXPECT_GT(peak, 0.1);

  // The code predictor: one frame's codebooks 1..15 from the talker's last hidden state.
  talker.init_predictor_cache(1);
  std::vector<float> predictor_logits;
  Tensor last = Tensor::empty({1, h}, DType::kF32);
  for (int64_t i = 0; i < h; ++i) last.data<float>()[i] = std::cos(0.1f * static_cast<float>(i));
  talker.predictor_prefill(std::vector<int32_t>{0}, last, std::vector<int32_t>{17}, predictor_logits);
  EXPECT_EQ(predictor_logits.size(), 2048u);
  talker.predictor_step(2, std::vector<int32_t>{0}, std::vector<int32_t>{5}, predictor_logits);
  EXPECT_EQ(predictor_logits.size(), 2048u);
}

// The demo's code2wav loads and decodes (its numbers: code2wav_test.cc).
TEST(Qwen3OmniTalkerTest, TheDemoCheckpointHasCode2Wav) {
  auto decoder = load_code2wav(demo_dir());
  std::vector<int32_t> codes(3 * 16);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<int32_t>((i * 131) % 2048);
  EXPECT_EQ(decoder->decode(codes).size(), 3u * 1920 - 555);
}

TEST(Qwen3OmniTalkerTest, ConfigErrorsNameTheField) {
  Json config = read_json_file(demo_dir() / "config.json");
  auto error_of = [](const Json& c) {
    try {
      parse_talker_config(c, "config.json");
      return std::string("no error");
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  Json c = config;
  c.erase("talker_config");
  EXPECT_EQ(error_of(c), "config.json: missing object 'talker_config'");
  c = config;
  c["talker_config"]["codec_eos_token_id"] = 5000;
  EXPECT_EQ(error_of(c), "config.json: talker_config: codec id 5000 is outside text_config.vocab_size 3072");
  c = config;
  c["talker_config"]["accept_hidden_layer"] = 9;
  EXPECT_EQ(error_of(c), "config.json: talker_config: accept_hidden_layer 9 is outside the thinker's 0..2 hidden states");
  c = config;
  c["talker_config"]["speaker_id"]["ethan"] = "x";
  EXPECT_EQ(error_of(c), "config.json: talker_config: speaker_id.ethan is not a codec id below 3072 (got \"x\")");
  c = config;
  c["talker_config"]["code_predictor_config"]["hidden_size"] = 32;
  EXPECT_NE(error_of(c).find("code_predictor_config.hidden_size 32 differs from text_config.hidden_size 64"),
            std::string::npos);
}

}  // namespace
}  // namespace omni::model::qwen3_omni
