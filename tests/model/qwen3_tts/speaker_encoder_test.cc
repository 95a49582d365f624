// The Qwen3-TTS speaker encoder (model/qwen3_tts/speaker_encoder.h) and the mel front end
// (model/mel_spectrogram.h) against tests/data/tiny_qwen3_tts_base (made by
// scripts/reference/make_tiny_qwen3_tts_base.py on the GPU machine): the log-mel of the reference
// waveform, and its x-vector from transformers' Qwen2.5-Omni ECAPA_TimeDelayNet (float32) and the
// float64 reference, within 1e-4; the x-vector-only clone prompt rows; the config reader; errors.
#include "model/qwen3_tts/speaker_encoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "model/mel_spectrogram.h"
#include "model/qwen3_tts/config.h"
#include "model/qwen3_tts/prompt.h"
#include "model/qwen3_tts/talker.h"
#include "tensor/npy.h"
#include "text/tokenizer/tokenizer.h"

namespace omni::model::qwen3_tts {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_tts_base";

std::vector<float> npy(const std::string& name) {
  const tensor::Tensor t = tensor::load_npy(kDir / name);
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(double{a[i]} - b[i]));
  return d;
}

const SpeakerEncoder& encoder() {
  static const SpeakerEncoder* e = [] {
    const TalkerConfig config = read_talker_config(kDir);
    return new SpeakerEncoder(Checkpoint::open(kDir), *config.speaker_encoder);
  }();
  return *e;
}

TEST(SpeakerEncoder, ConfigReadsTheBaseCheckpoint) {
  const TalkerConfig c = read_talker_config(kDir);
  EXPECT_EQ(c.model_type, TtsModelType::kBase);
  ASSERT_TRUE(c.speaker_encoder);
  EXPECT_EQ(c.speaker_encoder->enc_dim, 32);
  EXPECT_EQ(c.speaker_encoder->channels, (std::vector<int>{16, 16, 16, 16, 48}));
  EXPECT_EQ(c.speaker_encoder->res2net_scale, 4);
  EXPECT_EQ(c.speaker_embedding_dim, 32);
  // The released config.json gives only enc_dim and sample_rate: the rest are the defaults.
  const SpeakerEncoderConfig released = parse_talker_config(
                                            [] {
                                              Json j = read_json_file(kDir / "config.json");
                                              j["speaker_encoder_config"] = {{"enc_dim", 32}, {"sample_rate", 24000}};
                                              return j;
                                            }(),
                                            "cfg.json")
                                            .speaker_encoder.value();
  EXPECT_EQ(released.channels, (std::vector<int>{512, 512, 512, 512, 1536}));
  EXPECT_EQ(released.attention_channels, 128);
  EXPECT_EQ(released.res2net_scale, 8);
}

TEST(SpeakerEncoder, MelMatchesTheReference) {
  const std::vector<float> wave = npy("reference_waveform.npy");
  const std::vector<float> want = npy("reference_mel.npy");
  const std::vector<float> got = encoder().mel(wave);
  ASSERT_EQ(got.size(), want.size());  // 121 frames of 128
  EXPECT_LT(max_abs_diff(got, want), 1e-4);
}

TEST(SpeakerEncoder, XVectorMatchesTransformersAndTheFloat64Reference) {
  const std::vector<float> want = npy("reference_xvector.npy");
  const std::vector<float> transformers = npy("reference_xvector_transformers.npy");
  const std::vector<float> mel = npy("reference_mel.npy");
  const std::vector<float> from_mel = encoder().embed_mel(mel, static_cast<int64_t>(mel.size() / 128));
  EXPECT_LT(max_abs_diff(from_mel, want), 1e-4);
  EXPECT_LT(max_abs_diff(from_mel, transformers), 1e-4);
  const std::vector<float> from_audio = encoder().embed(npy("reference_waveform.npy"));
  EXPECT_LT(max_abs_diff(from_audio, want), 1e-4);
  // Not a constant: the embedding depends on the audio.
  std::vector<float> other = npy("reference_waveform.npy");
  for (size_t i = 0; i < other.size(); ++i) other[i] *= (i % 7 == 0 ? -0.5f : 1.0f);
  EXPECT_GT(max_abs_diff(encoder().embed(other), want), 1e-2);
}

TEST(SpeakerEncoder, CloneWithTheXVectorGivesTheReferencePrompt) {
  const Json ref = read_json_file(kDir / "reference.json");
  const Json& clone = ref["clone"];
  Talker talker(kDir, read_talker_config(kDir));
  const std::unique_ptr<text::Tokenizer> tokenizer = text::Tokenizer::load(kDir);
  SpeechRequest request;
  request.text = clone["text"];
  request.language = clone["language"];
  request.speaker_embedding = encoder().embed(npy("reference_waveform.npy"));
  const TalkerPrompt prompt = build_talker_prompt(request, talker, *tokenizer);
  const std::vector<float> rows = npy("prompt_base_clone.npy");
  const std::vector<float> trailing = npy("trailing_base_clone.npy");
  ASSERT_EQ(static_cast<size_t>(prompt.rows.numel()), rows.size());
  EXPECT_LT(max_abs_diff(std::span(prompt.rows.data<float>(), rows.size()), rows), 1e-4);
  ASSERT_EQ(static_cast<size_t>(prompt.trailing.numel()), trailing.size());
  EXPECT_LT(max_abs_diff(std::span(prompt.trailing.data<float>(), trailing.size()), trailing), 1e-4);
  EXPECT_EQ(prompt.text_ids, clone["text_ids"].get<std::vector<int32_t>>());
}

TEST(SpeakerEncoder, TooShortAudioIsAClearError) {
  const std::vector<float> short_audio(500, 0.1f);
  try {
    encoder().embed(short_audio);
    FAIL() << "500 samples were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("at least"), std::string::npos) << e.what();
  }
}

TEST(MelSpectrogram, SlaneyFilterbankIsTriangularWithAreaNorm) {
  const std::vector<double> bank = slaney_mel_filterbank(24000, 1024, 128, 0.0, 12000.0);
  ASSERT_EQ(bank.size(), 128u * 513u);
  for (int m = 0; m < 128; ++m) {
    const double peak = *std::max_element(bank.begin() + m * 513, bank.begin() + (m + 1) * 513);
    EXPECT_GT(peak, 0.0) << m;
  }
  EXPECT_THROW(slaney_mel_filterbank(24000, 1024, 128, 0.0, 13000.0), Error);
  EXPECT_EQ(reflect_pad(std::vector<float>{1, 2, 3, 4}, 2), (std::vector<float>{3, 2, 1, 2, 3, 4, 3, 2}));
}

}  // namespace
}  // namespace omni::model::qwen3_tts
