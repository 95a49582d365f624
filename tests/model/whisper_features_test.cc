// Whisper log-mel features (model/whisper_features.h): frame counts and valid frames of lone and
// batched audio, the shape of a tone's spectrum, the settings read from a checkpoint, and the
// errors. Equality with transformers' WhisperFeatureExtractor is checked on its reference outputs in
// qwen3_omni/thinker_audio_reference_test.cc.
#include "model/whisper_features.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "base/error.h"

namespace omni::model {
namespace {

const std::filesystem::path kCheckpoint =
    std::filesystem::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_omni/per_expert";

std::vector<float> tone(int64_t samples, double hz, double amplitude = 0.5) {
  std::vector<float> x(static_cast<size_t>(samples));
  for (int64_t i = 0; i < samples; ++i)
    x[i] = static_cast<float>(amplitude * std::sin(2 * std::numbers::pi * hz * i / 16000.0));
  return x;
}

WhisperFeatureExtractor qwen_features() { return WhisperFeatureExtractor(load_whisper_feature_config(kCheckpoint)); }

TEST(WhisperFeatures, ReadsTheCheckpointsSettings) {
  const WhisperFeatureConfig c = load_whisper_feature_config(kCheckpoint);
  EXPECT_EQ(c.feature_size, 128);
  EXPECT_EQ(c.sampling_rate, 16000);
  EXPECT_EQ(c.hop_length, 160);
  EXPECT_EQ(c.n_fft, 400);
  EXPECT_EQ(c.padding_value, 0.0f);
}

TEST(WhisperFeatures, LoneAudioHasFloorOfHopsFramesAndBatchedShorterOnesCeil) {
  const WhisperFeatureExtractor fe = qwen_features();
  const std::vector<float> short_audio = tone(19752, 440), long_audio = tone(149950, 440);
  std::vector<std::span<const float>> alone{short_audio};
  const auto one = fe.extract(alone);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].frames, 123);
  EXPECT_EQ(one[0].valid_frames, 123);
  EXPECT_EQ(one[0].mel_bins, 128);
  EXPECT_EQ(one[0].values.size(), 128u * 123u);
  EXPECT_EQ(fe.frames_for(19752), 123);

  std::vector<std::span<const float>> both{long_audio, short_audio};
  const auto two = fe.extract(both);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].frames, 937);
  EXPECT_EQ(two[0].valid_frames, 937);
  EXPECT_EQ(two[1].frames, 937);
  EXPECT_EQ(two[1].valid_frames, 124);  // ceil(19752 / 160): the padded audio keeps its last partial hop
}

TEST(WhisperFeatures, ToneLightsItsMelBandAndValuesStayWithinTheClampRange) {
  const WhisperFeatureExtractor fe = qwen_features();
  const std::vector<float> x = tone(16000, 1000);
  std::vector<std::span<const float>> audios{x};
  const LogMelFeatures f = fe.extract(audios)[0];
  const float top = *std::max_element(f.values.begin(), f.values.end());
  const float bottom = *std::min_element(f.values.begin(), f.values.end());
  EXPECT_GE(bottom, top - 2.0f - 1e-5f);  // clamped at max - 8 in log10, divided by 4
  // The loudest band of a middle frame sits at 1 kHz: the Slaney scale is linear below 1 kHz,
  // 200/3 Hz a mel, and 128 bands span 0..8 kHz (45.2 mels), so 1 kHz is band ~ 15 * 127/44.2.
  const int64_t frame = f.frames / 2;
  int64_t best = 0;
  for (int64_t m = 0; m < f.mel_bins; ++m) {
    if (f.values[m * f.frames + frame] > f.values[best * f.frames + frame]) best = m;
  }
  EXPECT_NEAR(static_cast<double>(best), 15.0 * 129.0 / 45.245 - 1.0, 1.5);
}

TEST(WhisperFeatures, RefusesAudioTooShortOrNotFinite) {
  const WhisperFeatureExtractor fe = qwen_features();
  const std::vector<float> ok = tone(1000, 300), tiny(200, 0.1f);
  std::vector<float> nan = ok;
  nan[10] = NAN;
  try {
    std::vector<std::span<const float>> audios{ok, tiny};
    fe.extract(audios);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("audio 1 has 200 samples; its features need at least 201"), std::string::npos)
        << e.what();
  }
  try {
    std::vector<std::span<const float>> audios{nan};
    fe.extract(audios);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("audio 0 holds a non-finite sample"), std::string::npos) << e.what();
  }
}

TEST(WhisperFeatures, RefusesDitherAndOtherExtractors) {
  EXPECT_THROW(parse_whisper_feature_config(Json{{"dither", 1e-5}}, "p.json"), Error);
  EXPECT_THROW(parse_whisper_feature_config(Json{{"feature_extractor_type", "SeamlessM4TFeatureExtractor"}}, "p.json"),
               Error);
  EXPECT_THROW(parse_whisper_feature_config(Json{{"hop_length", 0}}, "p.json"), Error);
  EXPECT_EQ(parse_whisper_feature_config(Json{{"dither", 0.0}, {"feature_size", 80}}, "p.json").feature_size, 80);
}

// Found in writing the whisper_config fuzzer: a padding_value past float's range was converted
// anyway (undefined behaviour), and sizes up to 2^24 were accepted, so n_fft 2^24 asked the extractor
// for a transform table of 2^48 floats.
TEST(WhisperFeatures, RefusesSizesPastTheirBoundsNamingTheField) {
  auto message = [](const Json& config) {
    try {
      parse_whisper_feature_config(config, "p.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(Json{{"n_fft", 1 << 24}}), "p.json: 'n_fft' must be an integer from 2 to 4096, got 16777216");
  EXPECT_EQ(message(Json{{"n_fft", 1}}), "p.json: 'n_fft' must be an integer from 2 to 4096, got 1");
  EXPECT_EQ(message(Json{{"feature_size", 1025}}),
            "p.json: 'feature_size' must be an integer from 1 to 1024, got 1025");
  EXPECT_EQ(message(Json{{"sampling_rate", 384001}}),
            "p.json: 'sampling_rate' must be an integer from 1 to 384000, got 384001");
  EXPECT_EQ(message(Json{{"hop_length", 18446744073709551615ull}}),
            "p.json: 'hop_length' must be an integer from 1 to 4096, got 18446744073709551615");
  EXPECT_EQ(message(Json{{"hop_length", 160.0}}), "p.json: 'hop_length' must be an integer from 1 to 4096, got 160.0");
  EXPECT_EQ(message(Json{{"padding_value", 1e300}}),
            "p.json: 'padding_value' must be a finite float32 number, got 1e+300");
  EXPECT_EQ(message(Json{{"feature_extractor_type", 3}}), "p.json: 'feature_extractor_type' must be a string, got 3");
  const WhisperFeatureConfig largest = parse_whisper_feature_config(Json{{"n_fft", 4096},
                                                                         {"hop_length", 4096},
                                                                         {"feature_size", 1024},
                                                                         {"sampling_rate", 384000},
                                                                         {"padding_value", -3.4e38}},
                                                                    "p.json");
  EXPECT_EQ(largest.n_fft, 4096);
  EXPECT_EQ(largest.hop_length, 4096);
  EXPECT_EQ(largest.feature_size, 1024);
  EXPECT_EQ(largest.sampling_rate, 384000);
  EXPECT_FLOAT_EQ(largest.padding_value, -3.4e38f);
}

}  // namespace
}  // namespace omni::model
