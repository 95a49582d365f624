// The Qwen2.5-Omni thinker LM and talker on a random tiny checkpoint: sectioned M-RoPE against
// transformers' formula, get_rope_index's rules on hand-made prompts, the talker's prompt layout,
// determinism and load errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "base/error.h"
#include "model/qwen2_5_omni/random_thinker_talker.h"
#include "model/qwen2_5_omni/talker_prompt.h"
#include "model/qwen2_5_omni/talker_stage_model.h"
#include "model/qwen2_5_omni/thinker.h"
#include "model/random_checkpoint.h"
#include "model/thinker_payload.h"
#include "tensor/ops.h"

namespace omni::model::qwen2_5_omni {
namespace {

namespace fs = std::filesystem;
using tensor::DType;
using tensor::Tensor;

fs::path tiny_dir() {
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / ("q25_thinker_talker_" + std::to_string(::getpid()));
    write_random_thinker_talker_checkpoint(d, tiny_thinker_talker_config(), 7);
    return d;
  }();
  return dir;
}

ThinkerTokenIds tiny_ids() { return parse_thinker_token_ids(tiny_thinker_talker_config(), "tiny"); }

std::vector<float> stream(const ThinkerPositions& p, int s) {
  const size_t n = p.streams.size() / 3;
  return {p.streams.begin() + s * n, p.streams.begin() + (s + 1) * n};
}

TEST(Qwen25OmniThinker, ConfigIsQwen2WithSectionedMrope) {
  const TextModelConfig c = parse_thinker_text_config(tiny_thinker_talker_config(), "tiny");
  EXPECT_EQ(c.rope.mrope_section, (std::vector<int>{2, 3, 3}));
  EXPECT_FALSE(c.rope.mrope_interleaved);
  EXPECT_EQ(c.hidden_size, 48);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{151}));
}

// transformers' apply_multimodal_rotary_pos_emb: cos/sin [3, T, hd] split into chunks of
// mrope_section * 2 along hd, chunk c taken from stream c % 3, then q * cos + rotate_half(q) * sin.
TEST(Qwen25OmniThinker, SectionedMropeMatchesTransformersFormula) {
  const std::array<int, 3> section{2, 3, 3};
  const int hd = 16, half = 8, tokens = 5, heads = 2;
  std::vector<float> pos = {0, 3, 7, 9, 20, 0, 1, 2, 30, 4, 0, 5, 1, 6, 11};  // [3, T]
  Tensor x = Tensor::empty({tokens, heads, hd}, DType::kF32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::sin(0.37f * static_cast<float>(i) + 0.1f);
  std::vector<float> want(x.numel());
  std::vector<int> chunk_stream;
  for (int rep = 0; rep < 2; ++rep)
    for (int c = 0; c < 3; ++c) chunk_stream.insert(chunk_stream.end(), section[c], c);
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      const float* v = x.data<float>() + (t * heads + h) * hd;
      for (int d = 0; d < hd; ++d) {
        const int i = d % half;
        const double angle = pos[chunk_stream[d] * tokens + t] * std::pow(10000.0, -2.0 * i / hd);
        const double rot = d < half ? -v[d + half] : v[d - half];
        want[(t * heads + h) * hd + d] = static_cast<float>(v[d] * std::cos(angle) + rot * std::sin(angle));
      }
    }
  }
  Tensor p = Tensor::empty({3, tokens}, DType::kF32);
  std::copy(pos.begin(), pos.end(), p.data<float>());
  tensor::ops::RopeSpec spec;
  spec.layout = tensor::ops::RopeLayout::kMropeSectioned;
  spec.theta = 10000.0f;
  spec.mrope_section = section;
  tensor::ops::rotary_embedding(x, p, spec);
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR(x.data<float>()[i], want[i], 2e-5) << i;
}

TEST(Qwen25OmniPositions, TextAndAudioAloneArePlain) {
  const ThinkerTokenIds ids = tiny_ids();
  PromptMedia media;
  media.audio_rows = {3};
  const std::vector<int32_t> prompt = {1, 2, ids.audio_start_token, ids.audio_token, ids.audio_end_token, 5};
  const std::vector<int32_t> expanded = expand_placeholders(prompt, ids, media);
  EXPECT_EQ(expanded.size(), 8u);
  const ThinkerPositions p = thinker_positions(expanded, ids, media);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(stream(p, s), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(p.rope_delta, 0.0f);
}

TEST(Qwen25OmniPositions, OneImageTakesGridPositions) {
  const ThinkerTokenIds ids = tiny_ids();
  PromptMedia media;
  media.images = {{.t = 1, .h = 4, .w = 6}};  // 2 x 3 blocks
  const std::vector<int32_t> prompt = {1, ids.vision_start_token, ids.image_token, ids.vision_end_token, 2, 3};
  const std::vector<int32_t> expanded = expand_placeholders(prompt, ids, media);
  ASSERT_EQ(expanded.size(), 11u);
  const ThinkerPositions p = thinker_positions(expanded, ids, media);
  // text 0, bos 1, rows start at 2: t = 2; h = 2 + row; w = 2 + column; eos = 4 + 1 = 5; text 6, 7.
  EXPECT_EQ(stream(p, 0), (std::vector<float>{0, 1, 2, 2, 2, 2, 2, 2, 5, 6, 7}));
  EXPECT_EQ(stream(p, 1), (std::vector<float>{0, 1, 2, 2, 2, 3, 3, 3, 5, 6, 7}));
  EXPECT_EQ(stream(p, 2), (std::vector<float>{0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(p.rope_delta, 8.0f - 11.0f);
}

TEST(Qwen25OmniPositions, AudioAt25PerSecondBesideAVideo) {
  const ThinkerTokenIds ids = tiny_ids();
  PromptMedia media;
  // 3 temporal patches of 2 s each (temporal patch 2 at 1 fps): t = 0, 50, 100; one block each.
  media.videos = {{.t = 3, .h = 2, .w = 2, .second_per_grid = 2.0}};
  media.audio_rows = {2};
  const std::vector<int32_t> prompt = {ids.audio_start_token,  ids.audio_token, ids.audio_end_token,
                                       ids.vision_start_token, ids.video_token, ids.vision_end_token};
  const std::vector<int32_t> expanded = expand_placeholders(prompt, ids, media);
  ASSERT_EQ(expanded.size(), 9u);
  const ThinkerPositions p = thinker_positions(expanded, ids, media);
  // audio: bos 0, rows 1, 2, eos 3; vision bos 4, rows at 5 + (0, 50, 100), eos 106.
  EXPECT_EQ(stream(p, 0), (std::vector<float>{0, 1, 2, 3, 4, 5, 55, 105, 106}));
  EXPECT_EQ(stream(p, 1), (std::vector<float>{0, 1, 2, 3, 4, 5, 5, 5, 106}));
  EXPECT_EQ(p.rope_delta, 107.0f - 9.0f);
}

TEST(Qwen25OmniPositions, VideoWithItsAudioInterleavesByChunks) {
  const ThinkerTokenIds ids = tiny_ids();
  PromptMedia media;
  media.use_audio_in_video = true;
  // t = 0, 25, 50, 75 (1 s per temporal patch); 60 audio rows: chunks of 50 positions.
  media.videos = {{.t = 4, .h = 2, .w = 2, .second_per_grid = 1.0}};
  media.audio_rows = {60};
  const std::vector<int32_t> prompt = {9, ids.vision_start_token, ids.video_token, ids.vision_end_token};
  const std::vector<int32_t> expanded = expand_placeholders(prompt, ids, media);
  // 9, vbos, abos, V V (t < 50), A x 50, V V (t 50, 75), A x 10, aeos, veos.
  ASSERT_EQ(expanded.size(), 1u + 2 + 2 + 50 + 2 + 10 + 2);
  EXPECT_EQ(expanded[3], ids.video_token);
  EXPECT_EQ(expanded[5], ids.audio_token);
  EXPECT_EQ(expanded[55], ids.video_token);
  EXPECT_EQ(expanded[57], ids.audio_token);
  const ThinkerPositions p = thinker_positions(expanded, ids, media);
  const std::vector<float> t = stream(p, 0);
  EXPECT_EQ(t[0], 0);
  EXPECT_EQ(t[1], 1);  // both start tokens take 1
  EXPECT_EQ(t[2], 1);
  EXPECT_EQ(t[3], 2);   // video t 0
  EXPECT_EQ(t[4], 27);  // video t 25
  EXPECT_EQ(t[5], 2);   // audio 0
  EXPECT_EQ(t[54], 51);
  EXPECT_EQ(t[55], 52);  // video t 50
  EXPECT_EQ(t[56], 77);
  EXPECT_EQ(t[57], 52);  // audio 50
  EXPECT_EQ(t[66], 61);
  // The end tokens follow the last chunk appended (audio, max 61), not the video's 77.
  EXPECT_EQ(t[67], 62);
  EXPECT_EQ(t[68], 62);
  EXPECT_EQ(p.rope_delta, 78.0f - 69.0f);
}

TEST(Qwen25OmniPositions, ChunkedIndexAsTransformers) {
  const std::vector<double> v = {0, 0, 0, 0, 100, 100, 100, 100};
  const auto chunks = chunked_index(v, 50);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0], (std::pair<int64_t, int64_t>{0, 4}));
  EXPECT_EQ(chunks[1], (std::pair<int64_t, int64_t>{4, 5}));
  EXPECT_EQ(chunks[2], (std::pair<int64_t, int64_t>{5, 8}));
}

TEST(Qwen25OmniPositions, MismatchedMediaNameTheCount) {
  const ThinkerTokenIds ids = tiny_ids();
  PromptMedia media;
  media.images = {{.t = 1, .h = 2, .w = 2}, {.t = 1, .h = 2, .w = 2}};
  try {
    expand_placeholders(std::vector<int32_t>{ids.vision_start_token, ids.image_token, ids.vision_end_token}, ids,
                        media);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 image and 0 videos, not 0, 2 and 0"), std::string::npos) << e.what();
  }
}

TEST(Qwen25OmniTalker, PromptRowsAndTextTrackLayout) {
  const TalkerConfig c = parse_talker_config(tiny_thinker_talker_config(), "tiny");
  const Talker talker(tiny_dir(), c, tensor::Device::cpu());
  const int64_t w = 48, l = 3, n = 6;  // 3 prompt rows, 3 reply rows
  std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6};
  std::vector<float> emb(n * w), hid(n * w);
  for (int64_t i = 0; i < n * w; ++i) {
    emb[i] = 0.01f * static_cast<float>(i);
    hid[i] = -0.003f * static_cast<float>(i % 17);
  }
  TalkerTextRows text{std::vector<float>(w, 0.5f), std::vector<float>(w, 0.25f), std::vector<float>(w, -0.75f)};
  const TalkerPrompt p =
      build_talker_prompt(talker, {.ids = ids, .prompt_length = l, .width = w, .embeddings = emb, .hidden = hid}, text);
  ASSERT_EQ(p.rows.dim(0), l + 2);
  std::vector<float> pad(w, 0.0f), bos(w, 0.0f);
  talker.add_codec_embedding(c.codec_pad, pad.data());
  talker.add_codec_embedding(c.codec_bos, bos.data());
  const float* r = p.rows.data<float>();
  for (int64_t i = 0; i < w; ++i) {
    for (int64_t k = 0; k < l; ++k) EXPECT_FLOAT_EQ(r[k * w + i], emb[k * w + i] + hid[k * w + i]);
    EXPECT_FLOAT_EQ(r[l * w + i], 0.5f + pad[i]);
    EXPECT_FLOAT_EQ(r[(l + 1) * w + i], emb[l * w + i] + hid[l * w + i] + bos[i]);
  }
  EXPECT_EQ(p.reply_rows, 3);
  EXPECT_FLOAT_EQ(talker_text_row(p, text, 0)[5], emb[4 * w + 5] + hid[4 * w + 5]);
  EXPECT_FLOAT_EQ(talker_text_row(p, text, 1)[5], emb[5 * w + 5] + hid[5 * w + 5]);
  EXPECT_EQ(talker_text_row(p, text, 2)[0], 0.25f);
  EXPECT_EQ(talker_text_row(p, text, 3)[0], -0.75f);
  EXPECT_EQ(talker_text_row(p, text, 9)[0], -0.75f);
  EXPECT_TRUE(p.mrope_positions.empty());
}

TEST(Qwen25OmniTalker, NeedsAReplyRow) {
  const TalkerConfig c = parse_talker_config(tiny_thinker_talker_config(), "tiny");
  const Talker talker(tiny_dir(), c, tensor::Device::cpu());
  std::vector<int32_t> ids = {1, 2};
  std::vector<float> rows(2 * 48);
  TalkerTextRows text{std::vector<float>(48), std::vector<float>(48), std::vector<float>(48)};
  EXPECT_THROW(build_talker_prompt(
                   talker, {.ids = ids, .prompt_length = 2, .width = 48, .embeddings = rows, .hidden = rows}, text),
               Error);
}

// The thinker's prefill with a capture -> payload -> talker stage prefill: its logits equal the
// talker's on the prompt built by hand, and a second run gives the same values.
TEST(Qwen25OmniTalker, StageReadsThinkerPayloadDeterministically) {
  const Json config = read_json_file(tiny_dir() / "config.json");
  Thinker thinker(tiny_dir(), config, {});
  ASSERT_EQ(thinker.downstream_layer(), 3);
  const std::vector<int32_t> prompt = {10, 11, 12, 13, 14};
  const std::vector<int32_t> reply = {20, 21};  // the reply tokens the thinker ran
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), reply.begin(), reply.end());
  thinker.init_kv_cache(4);
  ForwardBatch b;
  b.token_ids = all;
  for (int32_t i = 0; i < 7; ++i) b.positions.push_back(i);
  b.seqs = {{.query_start = 0, .query_len = 7, .context_len = 0, .block_table = {0}}};
  ForwardBatch::HiddenCapture capture{.layer = 3};
  b.capture = &capture;
  std::vector<float> logits;
  thinker.forward(b, logits);
  ASSERT_EQ(capture.hidden.size(), 7u * 48);
  DownstreamRows rows{.token_ids = all,
                      .first_position = 0,
                      .prompt_length = 5,
                      .hidden_size = 48,
                      .embeddings = capture.embeddings,
                      .hidden = capture.hidden};
  const std::vector<uint8_t> payload = thinker.encode_downstream_rows(rows);
  const ThinkerPayload decoded = decode_thinker_payload(payload);
  EXPECT_EQ(decoded.hidden.size(), 7u * 48);

  const auto run = [&] {
    TalkerStageModel stage(tiny_dir(), {{"Chelsie", kTinySpeakerBos}}, tensor::Device::cpu());
    stage.init_kv_cache(4);
    const Json info = Json::object();
    std::vector<std::span<const uint8_t>> inputs = {payload};
    ArRequestStart start = stage.start_request({.request_id = "r", .additional_information = info, .inputs = inputs});
    EXPECT_EQ(start.num_prompt_rows, 7);
    EXPECT_EQ(start.suppressed_tokens.size(), 1u);
    ForwardBatch step;
    for (int32_t i = 0; i < 7; ++i) step.positions.push_back(i);
    step.seqs = {{.query_start = 0, .query_len = 7, .context_len = 0, .block_table = {0}}};
    ArRequestState* state = start.state.get();
    std::vector<float> out;
    stage.forward_step(step, std::span<ArRequestState* const>(&state, 1), out);
    return out;
  };
  const std::vector<float> first = run();
  ASSERT_EQ(first.size(), 40u);
  EXPECT_EQ(run(), first);

  // By hand: the talker on build_talker_prompt's rows.
  const TalkerConfig c = parse_talker_config(config, "tiny");
  Talker talker(tiny_dir(), c, tensor::Device::cpu());
  talker.stack().init_kv_cache(4);
  TalkerTextRows text;
  const std::vector<int32_t> specials = {static_cast<int32_t>(kTinySpeakerBos), c.text_eos, c.text_pad};
  const std::vector<float> rows3 = thinker.embed_on_host(specials);
  text.speaker_bos.assign(rows3.begin(), rows3.begin() + 48);
  text.text_eos.assign(rows3.begin() + 48, rows3.begin() + 96);
  text.text_pad.assign(rows3.begin() + 96, rows3.end());
  const TalkerPrompt p = build_talker_prompt(
      talker, {.ids = all, .prompt_length = 5, .width = 48, .embeddings = capture.embeddings, .hidden = capture.hidden},
      text);
  ForwardBatch step;
  for (int32_t i = 0; i < 7; ++i) step.positions.push_back(i);
  step.seqs = {{.query_start = 0, .query_len = 7, .context_len = 0, .block_table = {0}}};
  std::vector<float> want;
  talker.forward(step, p.rows, want);
  ASSERT_EQ(want.size(), first.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(first[i], want[i], 1e-5f) << i;
}

TEST(Qwen25OmniTalker, LoadErrorsNameFieldAndTensor) {
  OrderedJson config = tiny_thinker_talker_config();
  config["talker_config"].erase("embedding_size");
  try {
    parse_talker_config(Json::parse(config.dump()), "cfg.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("talker_config.embedding_size"), std::string::npos) << e.what();
  }
  const fs::path dir = tiny_dir().string() + "_no_head";
  OrderedJson small = tiny_thinker_talker_config();
  write_random_thinker_talker_checkpoint(dir, small, 1);
  // Rewrite config with a wider codec vocabulary than the stored head has.
  small["talker_config"]["vocab_size"] = 41;
  write_json(dir / "config.json", small);
  try {
    Talker t(dir, parse_talker_config(read_json_file(dir / "config.json"), "cfg"), tensor::Device::cpu());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("talker.model.embed_tokens.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace omni::model::qwen2_5_omni
