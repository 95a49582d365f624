// The Qwen3-TTS speech-tokenizer encoder (model/qwen3_tts/speech_encoder.h) against
// tests/data/tiny_qwen3_tts_speech_encoder (made by scripts/reference/qwen3_tts_speech_encoder_reference.py
// on the GPU machine with transformers' MimiModel in float32): the codes of the Base reference
// waveform identical, the activations after the convolutions, the transformer and the downsampling
// within 1e-4 relative to their largest magnitude; the config reader and its errors.
#include "model/qwen3_tts/speech_encoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "tensor/npy.h"

namespace omni::model::qwen3_tts {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_tts_speech_encoder";
const fs::path kWaveform = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_tts_base/reference_waveform.npy";

template <typename T>
std::vector<T> npy(const fs::path& path) {
  const tensor::Tensor t = tensor::load_npy(path);
  const T* p = t.data<T>();
  return std::vector<T>(p, p + t.numel());
}

// [C, T] channel-major (the reference's layout) -> [T, C] time-major.
std::vector<float> transpose(const std::vector<float>& x, size_t channels) {
  const size_t steps = x.size() / channels;
  std::vector<float> out(x.size());
  for (size_t c = 0; c < channels; ++c) {
    for (size_t t = 0; t < steps; ++t) out[t * channels + c] = x[c * steps + t];
  }
  return out;
}

double relative_diff(std::span<const float> got, std::span<const float> want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff = std::max(diff, std::abs(double{got[i]} - want[i]));
    scale = std::max(scale, std::abs(double{want[i]}));
  }
  return diff / std::max(scale, 1e-30);
}

const SpeechEncoder& encoder() {
  static const SpeechEncoder* e = SpeechEncoder::load(kDir / "speech_tokenizer").release();
  return *e;
}

TEST(SpeechEncoder, ConfigReadsTheTinyTokenizer) {
  const SpeechEncoderConfig c = read_speech_encoder_config(kDir / "speech_tokenizer").value();
  EXPECT_EQ(c.hop(), 960);
  EXPECT_EQ(c.downsample_stride(), 2);
  EXPECT_EQ(c.samples_per_frame(), 1920);
  EXPECT_EQ(c.hidden_size, 16);
  EXPECT_EQ(c.num_filters, 4);
  EXPECT_EQ(c.num_quantizers, 20);
  EXPECT_EQ(c.valid_quantizers, 16);
  EXPECT_EQ(c.codebook_size, 64);
  EXPECT_EQ(c.codebook_dim, 8);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.sliding_window, 250);
}

TEST(SpeechEncoder, CodesAndActivationsMatchTransformersMimi) {
  const std::vector<float> wave = npy<float>(kWaveform);
  ASSERT_EQ(wave.size(), 31200u);
  SpeechEncoder::Activations acts;
  const std::vector<int32_t> codes = encoder().encode(wave, &acts);
  EXPECT_EQ(encoder().frames_for(31200), 17);

  const std::vector<float> conv = transpose(npy<float>(kDir / "after_encoder.npy"), 16);      // [16, 33]
  const std::vector<float> transformer = npy<float>(kDir / "after_encoder_transformer.npy");  // [33, 16]
  const std::vector<float> down = transpose(npy<float>(kDir / "after_downsample.npy"), 16);   // [16, 17]
  EXPECT_LT(relative_diff(acts.convolutions, conv), 1e-4);
  EXPECT_LT(relative_diff(acts.transformer, transformer), 1e-4);
  EXPECT_LT(relative_diff(acts.downsampled, down), 1e-4);

  // codes.npy is [16 codebooks, 17 frames]; encode() gives frame-major rows of 16.
  const std::vector<int32_t> want = npy<int32_t>(kDir / "codes.npy");
  ASSERT_EQ(codes.size(), want.size());
  size_t mismatches = 0;
  for (size_t q = 0; q < 16; ++q) {
    for (size_t f = 0; f < 17; ++f) {
      if (codes[f * 16 + q] != want[q * 17 + f]) ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0u);
  // Not trivially constant.
  EXPECT_GT(std::count(codes.begin(), codes.end(), codes[0]), 0);
  EXPECT_LT(std::count(codes.begin(), codes.end(), codes[0]), static_cast<long>(codes.size()));
}

TEST(SpeechEncoder, FrameCountIsTheCeilingOfSamplesOverTheFrame) {
  const std::vector<float> wave = npy<float>(kWaveform);
  for (size_t n : {1u, 1919u, 1920u, 1921u, 4000u}) {
    const std::vector<int32_t> codes = encoder().encode(std::span(wave).first(n));
    EXPECT_EQ(codes.size(), static_cast<size_t>(encoder().frames_for(static_cast<int64_t>(n)) * 16)) << n;
    for (int32_t c : codes) {
      EXPECT_GE(c, 0);
      EXPECT_LT(c, 64);
    }
  }
  // A prefix of the audio gives the codes of the whole audio's first frames: every part is causal.
  const std::vector<int32_t> all = encoder().encode(wave);
  const std::vector<int32_t> prefix = encoder().encode(std::span(wave).first(1920 * 8));
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.begin() + 7 * 16, all.begin()));
}

TEST(SpeechEncoder, ErrorsNameTheFieldOrTheInput) {
  EXPECT_THROW(encoder().encode(std::span<const float>()), Error);
  const fs::path dir = fs::temp_directory_path() / "omni_speech_encoder_config_test";
  fs::create_directories(dir);
  Json config = read_json_file(kDir / "speech_tokenizer/config.json");
  {
    Json decoder_only = config;
    decoder_only.erase("encoder_config");
    std::ofstream(dir / "config.json") << decoder_only.dump();
    EXPECT_FALSE(read_speech_encoder_config(dir).has_value());
  }
  config["encoder_config"]["use_causal_conv"] = false;
  std::ofstream(dir / "config.json") << config.dump();
  try {
    read_speech_encoder_config(dir);
    FAIL() << "a non-causal encoder was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLoadFailed);
    EXPECT_NE(std::string(e.what()).find("use_causal_conv"), std::string::npos) << e.what();
  }
  config["encoder_config"]["use_causal_conv"] = true;
  config["encode_downsample_rate"] = 960;
  std::ofstream(dir / "config.json") << config.dump();
  EXPECT_THROW(read_speech_encoder_config(dir), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace omni::model::qwen3_tts
