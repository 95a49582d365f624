// The Qwen3-Omni talker's configuration and the Qwen3-TTS talker machinery on its checkpoint
// layout (model/qwen3_omni/talker_config.h), on the demo checkpoint of
// model/qwen3_omni/random_checkpoint.h: what the config says, that the stack (MoE with a shared
// expert), the projections of thinker rows, the codec head and the code predictor load from the
// released names and compute consistently (a chunked prefill equals the whole one, the projections
// are the documented MLP), and the config's errors. Its numbers against transformers are
// scripts/reference/qwen3_omni_speech_reference.py's (not yet run).
#include "model/qwen3_tts/talker.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"
#include "model/qwen3_omni/code2wav.h"
#include "model/qwen3_omni/random_checkpoint.h"
#include "model/qwen3_omni/talker_config.h"
#include "model/qwen3_omni/talker_prompt.h"
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

// The first `rows` rows of a host float32 matrix, copied.
Tensor rows_prefix(const Tensor& t, int64_t rows) {
  Tensor out = Tensor::empty({rows, t.dim(1)}, DType::kF32);
  std::copy_n(t.data<float>(), rows * t.dim(1), out.data<float>());
  return out;
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
  EXPECT_THROW(
      talker.project_rows(Tensor::zeros({2, thinker_h + 1}, DType::kF32), qwen3_tts::Talker::Projection::kText), Error);

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

// The prompt from the thinker's rows: the system turn skipped, the user turn's audio rows from the
// hidden projection and its text rows from the text projection, the reply's 9 rows (text track
// plus codec track) and its trailing text.
TEST(Qwen3OmniTalkerTest, ThePromptTakesTheUserTurnAndTheReply) {
  const TalkerConfig c = read_talker_config(demo_dir());
  qwen3_tts::Talker talker(demo_dir(), c.talker);
  const int64_t h = talker.hidden_size(), w = c.talker.text_hidden_size;
  const int32_t start = c.talker.im_start_token_id, end = c.talker.im_end_token_id, audio = c.audio_token_id;
  const std::vector<int32_t> ids = {start, c.system_token_id,
                                    198,   87,
                                    end,   198,  // system
                                    start, c.user_token_id,
                                    198,   64,
                                    audio, audio,
                                    65,    end,
                                    198,  // user
                                    start, c.talker.assistant_token_id,
                                    198,   81,
                                    82,    83,
                                    end};  // reply
  const size_t prompt_length = 18;
  const int64_t n = static_cast<int64_t>(ids.size()) - 1;  // the last token never ran through the thinker
  auto filled = [&](int64_t rows, float phase) {
    Tensor t = Tensor::empty({rows, w}, DType::kF32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::sin(phase + 0.013f * static_cast<float>(i));
    return t;
  };
  ThinkerRows thinker{ids, prompt_length, filled(n, 0.0f), filled(n, 1.0f), filled(3, 2.0f)};
  const qwen3_tts::TalkerPrompt prompt = build_talker_prompt(talker, c, thinker, *c.talker.speaker_id("ethan"));

  const Tensor text = talker.project_rows(thinker.embeddings, qwen3_tts::Talker::Projection::kText);
  const Tensor media = talker.project_rows(thinker.accepted_hidden, qwen3_tts::Talker::Projection::kHidden);
  const Tensor specials = talker.project_rows(thinker.special_embeddings, qwen3_tts::Talker::Projection::kText);
  auto row = [&](const Tensor& t, int64_t r) {
    return std::vector<float>(t.data<float>() + r * h, t.data<float>() + (r + 1) * h);
  };
  auto with_codec = [&](std::vector<float> r, int32_t id) {
    talker.add_codec_embedding(id, r.data());
    return r;
  };
  std::vector<std::vector<float>> want;
  for (int64_t p = 6; p < 15; ++p) want.push_back(row(ids[p] == audio ? media : text, p));
  const std::vector<float> tts_bos = row(specials, 0), tts_eos = row(specials, 1), tts_pad = row(specials, 2);
  want.push_back(row(text, 15));
  want.push_back(row(text, 16));
  want.push_back(row(text, 17));
  want.push_back(with_codec(tts_pad, c.talker.codec_nothink_id));
  want.push_back(with_codec(tts_pad, c.talker.codec_think_bos_id));
  want.push_back(with_codec(tts_pad, c.talker.codec_think_eos_id));
  want.push_back(with_codec(tts_pad, 2302));
  want.push_back(with_codec(tts_bos, c.talker.codec_pad_id));
  want.push_back(with_codec(row(text, 18), c.talker.codec_bos_id));
  // The projections here ran over other row counts than the prompt's: equal within float32 rounding.
  auto expect_near = [](const std::vector<float>& got, const std::vector<float>& expected, const std::string& what) {
    ASSERT_EQ(got.size(), expected.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], expected[i], 1e-5f * (1.0f + std::abs(expected[i]))) << what << ", element " << i;
    }
  };
  ASSERT_EQ(prompt.rows.shape(), (tensor::Shape{static_cast<int64_t>(want.size()), h}));
  for (size_t r = 0; r < want.size(); ++r)
    expect_near(row(prompt.rows, static_cast<int64_t>(r)), want[r], "row " + std::to_string(r));
  ASSERT_EQ(prompt.trailing.shape(), (tensor::Shape{3, h}));  // the reply's 2nd and 3rd tokens, then tts_eos
  expect_near(row(prompt.trailing, 0), row(text, 19), "trailing 0");
  expect_near(row(prompt.trailing, 1), row(text, 20), "trailing 1");
  expect_near(row(prompt.trailing, 2), tts_eos, "trailing 2");
  expect_near(std::vector<float>(prompt.tts_pad.data<float>(), prompt.tts_pad.data<float>() + h), tts_pad, "tts_pad");
  // The audio rows are the hidden projection's, not the text projection's.
  EXPECT_GT(std::abs(row(prompt.rows, 4)[0] - row(text, 10)[0]), 1e-4f);

  // A conversation that does not end in the reply, and a reply without a first token.
  ThinkerRows no_reply{std::span(ids).first(15), 15, rows_prefix(thinker.embeddings, 15),
                       rows_prefix(thinker.accepted_hidden, 15), thinker.special_embeddings};
  EXPECT_THROW(build_talker_prompt(talker, c, no_reply, 2302), Error);
  ThinkerRows too_early{std::span(ids).first(18), 18, rows_prefix(thinker.embeddings, 18),
                        rows_prefix(thinker.accepted_hidden, 18), thinker.special_embeddings};
  try {
    build_talker_prompt(talker, c, too_early, 2302);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "talker prompt: the reply has no first token yet (the assistant segment has 3 rows, 4 needed)");
  }
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
  EXPECT_EQ(error_of(c),
            "config.json: talker_config: accept_hidden_layer 9 is outside the thinker's 0..2 hidden states");
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
