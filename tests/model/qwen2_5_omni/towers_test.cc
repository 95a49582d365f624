// The Qwen2.5-Omni thinker towers on the random checkpoint of towers_random_checkpoint.h: output
// lengths and grids, the window reordering, that attention stays inside a chunk or a window, that
// encoding is deterministic and that loading names the tensor or field at fault. The comparison
// with transformers is towers_reference_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "model/qwen2_5_omni/audio_encoder.h"
#include "model/qwen2_5_omni/audio_processor.h"
#include "model/qwen2_5_omni/towers_random_checkpoint.h"
#include "model/qwen2_5_omni/vision_encoder.h"
#include "model/safetensors.h"
#include "model/vision_processor.h"
#include "support/temp_dir.h"

namespace omni::model::qwen2_5_omni {
namespace {

using tensor::DType;
using tensor::Tensor;

// A message-matching expectation: `fn` throws omni::Error whose text contains `needle`.
template <typename Fn>
void expect_error_naming(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one naming " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

class TowersTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new omni::testing::TempDir();
    write_random_towers_checkpoint(dir_->path(), tiny_tower_shapes(), 7);
    ckpt_ = new Checkpoint(Checkpoint::open(dir_->path()));
  }
  static void TearDownTestSuite() {
    delete ckpt_;
    delete dir_;
  }
  static omni::testing::TempDir* dir_;
  static Checkpoint* ckpt_;
};

omni::testing::TempDir* TowersTest::dir_ = nullptr;
Checkpoint* TowersTest::ckpt_ = nullptr;

// Deterministic features [128, frames].
std::vector<float> features(int64_t frames, uint64_t seed) {
  std::vector<float> f(static_cast<size_t>(128 * frames));
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(std::sin(0.37 * i + 1.3 * seed)) * 0.8f;
  return f;
}

TEST(AudioOutputLength, FollowsTheConvolutionAndThePool) {
  // (frames - 1) / 2 + 1 after conv2, then half of that, floored.
  EXPECT_EQ(audio_conv_length(37), 19);
  EXPECT_EQ(audio_output_length(1), 0);
  EXPECT_EQ(audio_output_length(2), 0);
  EXPECT_EQ(audio_output_length(3), 1);
  EXPECT_EQ(audio_output_length(16), 4);
  EXPECT_EQ(audio_output_length(37), 9);
  EXPECT_EQ(audio_output_length(124), 31);
  EXPECT_EQ(audio_output_length(200), 50);
  // 300 s at 100 frames a second: 25 rows a second.
  EXPECT_EQ(audio_output_length(30000), 7500);
}

TEST_F(TowersTest, AudioRowsPerAudioFollowTheOutputLength) {
  const AudioEncoderConfig c = tiny_tower_shapes().audio;
  const AudioEncoder enc(*ckpt_, c, "thinker.audio_tower.");
  const std::vector<int64_t> lengths{3, 16, 37, 40, 124};
  std::vector<std::vector<float>> f;
  std::vector<AudioFeatures> in;
  int64_t want = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    f.push_back(features(lengths[i], i));
    want += audio_output_length(lengths[i]);
  }
  for (size_t i = 0; i < lengths.size(); ++i) in.push_back({f[i].data(), lengths[i], lengths[i]});
  const Tensor rows = enc.encode(in);
  EXPECT_EQ(rows.shape(), (tensor::Shape{want, c.output_dim}));
  for (int64_t i = 0; i < rows.numel(); ++i) ASSERT_TRUE(std::isfinite(rows.data<float>()[i]));

  // Each audio alone gives its rows of the batch (audios never see each other).
  int64_t first = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const AudioFeatures one[1] = {in[i]};
    const Tensor alone = enc.encode(one);
    ASSERT_EQ(alone.dim(0), audio_output_length(lengths[i]));
    for (int64_t j = 0; j < alone.numel(); ++j) {
      ASSERT_NEAR(alone.data<float>()[j], rows.data<float>()[first * c.output_dim + j], 1e-5) << "audio " << i;
    }
    first += alone.dim(0);
  }
}

TEST_F(TowersTest, AudioAttentionStaysInsideAChunk) {
  // 40 frames in chunks of 16: 16 + 16 + 8 frames, 8 + 8 + 4 conv rows, pooled rows 0-3 | 4-7 | 8-9.
  const AudioEncoderConfig c = tiny_tower_shapes().audio;
  ASSERT_EQ(2 * c.n_window, 16);
  const AudioEncoder enc(*ckpt_, c, "thinker.audio_tower.");
  std::vector<float> f = features(40, 3);
  const AudioFeatures in[1] = {{f.data(), 40, 40}};
  const Tensor before = enc.encode(in);
  for (int64_t m = 0; m < 128; ++m)
    for (int64_t t = 16; t < 32; ++t) f[m * 40 + t] += 0.5f;
  const Tensor after = enc.encode(in);
  ASSERT_EQ(before.shape(), (tensor::Shape{10, c.output_dim}));
  for (int64_t r = 0; r < 10; ++r) {
    const float* a = before.data<float>() + r * c.output_dim;
    const float* b = after.data<float>() + r * c.output_dim;
    const bool same = std::equal(a, a + c.output_dim, b);
    EXPECT_EQ(same, r < 4 || r >= 8) << "row " << r;
  }
}

TEST_F(TowersTest, AudioEncodingIsDeterministic) {
  const AudioEncoder enc(*ckpt_, tiny_tower_shapes().audio, "thinker.audio_tower.");
  const std::vector<float> f = features(50, 9);
  const AudioFeatures in[1] = {{f.data(), 50, 50}};
  const Tensor a = enc.encode(in), b = enc.encode(in);
  ASSERT_EQ(a.shape(), b.shape());
  EXPECT_TRUE(std::equal(a.data<float>(), a.data<float>() + a.numel(), b.data<float>()));
}

TEST_F(TowersTest, AudioErrorsNameTheTensorAndTheAudio) {
  AudioEncoderConfig c = tiny_tower_shapes().audio;
  c.encoder_ffn_dim = 65;
  expect_error_naming([&] { AudioEncoder(*ckpt_, c, "thinker.audio_tower."); },
                      "thinker.audio_tower.layers.0.fc1.weight");
  c = tiny_tower_shapes().audio;
  c.num_mel_bins = 80;
  expect_error_naming([&] { AudioEncoder(*ckpt_, c, "thinker.audio_tower."); }, "thinker.audio_tower.conv1.weight");
  const AudioEncoder enc(*ckpt_, tiny_tower_shapes().audio, "thinker.audio_tower.");
  const std::vector<float> f = features(5, 1);
  const AudioFeatures in[2] = {{f.data(), 5, 5}, {f.data(), 2, 5}};
  expect_error_naming([&] { enc.encode(in); }, "audio 1 has 2 feature frames");
}

TEST(AudioEncoderConfig, ParsesAndRejectsWhatItCannotRun) {
  const Json c = {{"d_model", 64}, {"encoder_attention_heads", 4}, {"n_window", 50}, {"output_dim", 96}};
  const AudioEncoderConfig a = parse_audio_encoder_config(c, "config.json");
  EXPECT_EQ(a.d_model, 64);
  EXPECT_EQ(a.n_window, 50);
  EXPECT_EQ(a.output_dim, 96);
  EXPECT_EQ(a.num_mel_bins, 128);
  expect_error_naming(
      [] {
        parse_audio_encoder_config({{"activation_function", "relu"}}, "x.json");
      },
      "activation_function 'relu'");
  expect_error_naming(
      [] {
        parse_audio_encoder_config({{"d_model", 30}, {"encoder_attention_heads", 4}}, "x.json");
      },
      "d_model 30");
  expect_error_naming([] { parse_audio_encoder_config({{"n_window", "8"}}, "x.json"); }, "n_window");
}

TEST(AudioProcessor, ValidFramesAndTruncation) {
  WhisperFeatureConfig w;
  w.feature_size = 128;
  const AudioProcessor p(w, 4000);
  EXPECT_EQ(p.valid_frames(5920), 25);  // truncated to 4000 samples
  EXPECT_EQ(p.valid_frames(1601), 11);  // ceil(1601 / 160)
  EXPECT_EQ(p.valid_frames(1600), 10);
  std::vector<float> a(1601), b(9000);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.3f * static_cast<float>(std::sin(0.05 * i));
  std::copy(b.begin(), b.begin() + 1601, a.begin());
  const std::span<const float> audios[2] = {a, b};
  const std::vector<LogMelFeatures> f = p.extract(audios);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].valid_frames, 11);
  EXPECT_EQ(f[1].valid_frames, 25);
  EXPECT_EQ(f[0].mel_bins, 128);
  // Each audio is processed on its own: the first one's frames do not depend on the second.
  const std::span<const float> first[1] = {a};
  const std::vector<LogMelFeatures> alone = p.extract(first);
  for (int64_t m = 0; m < 128; ++m)
    for (int64_t t = 0; t < 11; ++t)
      ASSERT_EQ(alone[0].values[m * alone[0].frames + t], f[0].values[m * f[0].frames + t]);
  const std::span<const float> empty[1] = {std::span<const float>()};
  expect_error_naming([&] { p.extract(empty); }, "audio 0 has no samples");
}

TEST(WindowLayout, ReordersBlocksIntoWindowsAndBack) {
  // A 6 x 10 patch grid: 3 x 5 blocks in windows of 2 x 2 blocks, cut at the right and bottom.
  const VisionGrid grids[2] = {{1, 6, 10}, {2, 4, 4}};
  const WindowLayout w = window_layout(grids, 2, 2);
  EXPECT_EQ(w.window_patches, (std::vector<int64_t>{16, 16, 8, 8, 8, 4, 16, 16}));
  ASSERT_EQ(w.order.size(), 15u + 8u);
  EXPECT_EQ(std::vector<int64_t>(w.order.begin(), w.order.begin() + 15),
            (std::vector<int64_t>{0, 1, 5, 6, 2, 3, 7, 8, 4, 9, 10, 11, 12, 13, 14}));
  // The second medium (two temporal slices of one window each) follows the first.
  EXPECT_EQ(std::vector<int64_t>(w.order.begin() + 15, w.order.end()),
            (std::vector<int64_t>{15, 16, 17, 18, 19, 20, 21, 22}));
  // A permutation, whose inverse restores the order.
  std::vector<int64_t> sorted = w.order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(sorted.size());
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  std::vector<int64_t> inverse(w.order.size());
  for (size_t k = 0; k < w.order.size(); ++k) inverse[w.order[k]] = static_cast<int64_t>(k);
  for (size_t b = 0; b < inverse.size(); ++b) EXPECT_EQ(w.order[inverse[b]], static_cast<int64_t>(b));
  EXPECT_EQ(std::accumulate(w.window_patches.begin(), w.window_patches.end(), int64_t{0}), 60 + 32);

  // The released window (112 px, 14-pixel patches: 4 x 4 blocks) over a 20 x 28 patch grid: 10 x
  // 14 blocks in 3 x 4 windows.
  const VisionGrid big[1] = {{1, 20, 28}};
  const WindowLayout r = window_layout(big, 2, 112 / 2 / 14);
  EXPECT_EQ(r.window_patches.size(), 12u);
  EXPECT_EQ(r.window_patches.front(), 64);
  EXPECT_EQ(r.window_patches.back(), 2 * 2 * 4);
  const VisionGrid odd[1] = {{1, 5, 4}};
  expect_error_naming([&] { window_layout(odd, 2, 2); }, "medium 0: the grid 1 x 5 x 4");
}

// Deterministic patches for `grids`.
Tensor patches_for(std::span<const VisionGrid> grids, int64_t values) {
  int64_t n = 0;
  for (const VisionGrid& g : grids) n += g[0] * g[1] * g[2];
  Tensor p = Tensor::empty({n, values}, DType::kF32);
  for (int64_t i = 0; i < p.numel(); ++i) p.data<float>()[i] = static_cast<float>(std::cos(0.013 * i)) * 1.5f;
  return p;
}

TEST_F(TowersTest, VisionRowsFollowTheGrids) {
  const VisionEncoderConfig c = tiny_tower_shapes().vision;
  const VisionEncoder enc(*ckpt_, c, "thinker.visual.");
  const VisionGrid grids[3] = {{1, 6, 10}, {1, 4, 4}, {2, 8, 6}};
  const Tensor patches = patches_for(grids, c.patch_values());
  const Tensor rows = enc.encode(patches, grids);
  EXPECT_EQ(rows.shape(), (tensor::Shape{15 + 4 + 24, c.out_hidden_size}));
  const Tensor again = enc.encode(patches, grids);
  EXPECT_TRUE(std::equal(rows.data<float>(), rows.data<float>() + rows.numel(), again.data<float>()));
  expect_error_naming([&] { enc.encode(patches.slice_rows(0, 10), grids); }, "do not fit the grids");
}

TEST_F(TowersTest, VisionWindowAttentionStaysInsideAWindow) {
  // Without full-attention blocks a change to one patch reaches only the blocks of its window, and
  // they come back at their places in the processor's order.
  VisionEncoderConfig c = tiny_tower_shapes().vision;
  c.fullatt_block_indexes.clear();
  const VisionEncoder enc(*ckpt_, c, "thinker.visual.");
  const VisionGrid grids[1] = {{1, 6, 10}};  // 3 x 5 blocks
  Tensor patches = patches_for(grids, c.patch_values());
  const Tensor before = enc.encode(patches, grids);
  // Block 7 (row 1, column 2) is in the window of blocks {2, 3, 7, 8}; its first patch is 28.
  for (int64_t i = 0; i < c.patch_values(); ++i) patches.data<float>()[28 * c.patch_values() + i] += 1.0f;
  const Tensor after = enc.encode(patches, grids);
  const int64_t w = c.out_hidden_size;
  for (int64_t b = 0; b < 15; ++b) {
    const bool same =
        std::equal(before.data<float>() + b * w, before.data<float>() + (b + 1) * w, after.data<float>() + b * w);
    EXPECT_EQ(same, !(b == 2 || b == 3 || b == 7 || b == 8)) << "block " << b;
  }
  // With block 1 attending over the whole picture, every block changes.
  const VisionEncoder full(*ckpt_, tiny_tower_shapes().vision, "thinker.visual.");
  const Tensor full_before = full.encode(patches_for(grids, c.patch_values()), grids);
  const Tensor full_after = full.encode(patches, grids);
  for (int64_t b = 0; b < 15; ++b) {
    EXPECT_FALSE(std::equal(full_before.data<float>() + b * w, full_before.data<float>() + (b + 1) * w,
                            full_after.data<float>() + b * w))
        << "block " << b;
  }
}

TEST_F(TowersTest, VisionErrorsNameTheTensorAndTheField) {
  VisionEncoderConfig c = tiny_tower_shapes().vision;
  c.intermediate_size = 41;
  expect_error_naming([&] { VisionEncoder(*ckpt_, c, "thinker.visual."); },
                      "thinker.visual.blocks.0.mlp.gate_proj.weight");
  c = tiny_tower_shapes().vision;
  c.out_hidden_size = 50;
  expect_error_naming([&] { VisionEncoder(*ckpt_, c, "thinker.visual."); }, "thinker.visual.merger.mlp.2.weight");
  expect_error_naming([] { parse_vision_encoder_config({{"hidden_act", "gelu"}}, "v.json"); }, "hidden_act 'gelu'");
  expect_error_naming([] { parse_vision_encoder_config({{"window_size", 20}}, "v.json"); }, "window_size 20");
  expect_error_naming(
      [] {
        parse_vision_encoder_config({{"depth", 4}, {"fullatt_block_indexes", {1, 4}}}, "v.json");
      },
      "'fullatt_block_indexes' entry 4");
  const VisionEncoderConfig v = parse_vision_encoder_config({{"in_chans", 3}, {"window_size", 112}}, "v.json");
  EXPECT_EQ(v.window_blocks(), 4);
  EXPECT_EQ(v.fullatt_block_indexes, (std::vector<int>{7, 15, 23, 31}));
}

TEST_F(TowersTest, TheCheckpointCarriesTheReleasedProcessorSettings) {
  const Json config = read_json_file(dir_->path() / "config.json");
  const AudioEncoderConfig a = thinker_audio_config(config, "config.json");
  EXPECT_EQ(a.n_window, tiny_tower_shapes().audio.n_window);
  EXPECT_EQ(thinker_vision_config(config, "config.json").fullatt_block_indexes, std::vector<int>{1});
  expect_error_naming([] { thinker_audio_config(Json::object(), "c.json"); }, "thinker_config.audio_config");
  expect_error_naming(
      [] {
        thinker_vision_config({{"thinker_config", Json::object()}}, "c.json");
      },
      "thinker_config.vision_config");
  const AudioProcessor audio = AudioProcessor::load(dir_->path());
  EXPECT_EQ(audio.max_samples(), 4800000);
  EXPECT_EQ(audio.config().feature_size, 128);
  const VisionProcessorConfig p = load_vision_processor_config(dir_->path());
  EXPECT_EQ(p.patch_size, 14);
  EXPECT_EQ(p.video_pixel_range(), (std::array<int64_t, 2>{128 * 28 * 28, 768 * 28 * 28}));
  // A 70 x 100 video frame is scaled up to the video minimum; a 90 x 150 image only rounded.
  const auto [vmin, vmax] = p.video_pixel_range();
  EXPECT_EQ(smart_resize(70, 100, 28, vmin, vmax), (std::array<int64_t, 2>{280, 392}));
  EXPECT_EQ(smart_resize(90, 150, 28, p.min_pixels, p.max_pixels), (std::array<int64_t, 2>{84, 140}));
}

}  // namespace
}  // namespace omni::model::qwen2_5_omni
