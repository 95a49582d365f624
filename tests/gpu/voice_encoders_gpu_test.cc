// The voice-cloning encoders of Qwen3-TTS Base on CUDA (float32): the speaker encoder's x-vector and
// the speech-tokenizer encoder's codes and activations against the same transformers references the
// CPU tests use (tests/data/tiny_qwen3_tts_base, tiny_qwen3_tts_speech_encoder: x-vector within
// 1e-4, codes identical, activations within 1e-4 of their largest magnitude), and the released
// speech-encoder shapes (random weights, 3 s of audio) on CUDA against the CPU: cuBLASLt sums in
// another order than our CPU gemm, so activations agree within float32 rounding and the codes,
// chosen by exact float64 distances, agree unless two codebook entries are within that rounding of
// each other. Every test skips when no GPU is visible (ctest label gpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "model/qwen3_tts/config.h"
#include "model/qwen3_tts/random_codec.h"
#include "model/qwen3_tts/speaker_encoder.h"
#include "model/qwen3_tts/speech_encoder.h"
#include "support/temp_dir.h"
#include "tensor/backend.h"
#include "tensor/npy.h"

namespace omni::model::qwen3_tts {
namespace {

namespace fs = std::filesystem;

#define SKIP_WITHOUT_GPU()                                                                                           \
  if (tensor::compiled_backends().find("cuda") == std::string::npos) GTEST_SKIP() << "no CUDA backend in the build"; \
  if (tensor::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process"

const fs::path kBase = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_tts_base";
const fs::path kTokenizer = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_tts_speech_encoder";

template <typename T>
std::vector<T> npy(const fs::path& path) {
  const tensor::Tensor t = tensor::load_npy(path);
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(double{a[i]} - b[i]));
  return d;
}

double relative_diff(std::span<const float> got, std::span<const float> want) {
  double scale = 0;
  for (float v : want) scale = std::max(scale, std::abs(double{v}));
  return max_abs_diff(got, want) / std::max(scale, 1e-30);
}

// [C, T] channel-major (the reference's layout) -> [T, C].
std::vector<float> transpose(const std::vector<float>& x, size_t channels) {
  const size_t steps = x.size() / channels;
  std::vector<float> out(x.size());
  for (size_t c = 0; c < channels; ++c) {
    for (size_t t = 0; t < steps; ++t) out[t * channels + c] = x[c * steps + t];
  }
  return out;
}

TEST(VoiceEncodersGpu, XVectorMatchesTransformers) {
  SKIP_WITHOUT_GPU();
  const TalkerConfig config = read_talker_config(kBase);
  const SpeakerEncoder encoder(Checkpoint::open(kBase), *config.speaker_encoder, tensor::Device::cuda(0));
  const std::vector<float> got = encoder.embed(npy<float>(kBase / "reference_waveform.npy"));
  EXPECT_LT(max_abs_diff(got, npy<float>(kBase / "reference_xvector.npy")), 1e-4);
  EXPECT_LT(max_abs_diff(got, npy<float>(kBase / "reference_xvector_transformers.npy")), 1e-4);
}

TEST(VoiceEncodersGpu, SpeechEncoderCodesMatchTransformersMimi) {
  SKIP_WITHOUT_GPU();
  const auto encoder = SpeechEncoder::load(kTokenizer / "speech_tokenizer", tensor::Device::cuda(0));
  SpeechEncoder::Activations acts;
  const std::vector<int32_t> codes = encoder->encode(npy<float>(kBase / "reference_waveform.npy"), &acts);
  EXPECT_LT(relative_diff(acts.convolutions, transpose(npy<float>(kTokenizer / "after_encoder.npy"), 16)), 1e-4);
  EXPECT_LT(relative_diff(acts.transformer, npy<float>(kTokenizer / "after_encoder_transformer.npy")), 1e-4);
  EXPECT_LT(relative_diff(acts.downsampled, transpose(npy<float>(kTokenizer / "after_downsample.npy"), 16)), 1e-4);
  const std::vector<int32_t> want = npy<int32_t>(kTokenizer / "codes.npy");  // [16 codebooks, 17 frames]
  ASSERT_EQ(codes.size(), want.size());
  for (size_t q = 0; q < 16; ++q) {
    for (size_t f = 0; f < 17; ++f)
      EXPECT_EQ(codes[f * 16 + q], want[q * 17 + f]) << "codebook " << q << " frame " << f;
  }
}

TEST(VoiceEncodersGpu, ReleasedSpeechEncoderShapesMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  testing::TempDir dir;
  const SpeechEncoderConfig released;
  write_random_codec_checkpoint(dir.path(), small_codec_shapes(), 7, &released);
  const auto cpu = SpeechEncoder::load(dir.path());
  const auto gpu = SpeechEncoder::load(dir.path(), tensor::Device::cuda(0));
  std::vector<float> wave(72000);  // 3 s at 24 kHz: two tones and a sweep
  for (size_t i = 0; i < wave.size(); ++i) {
    const double t = static_cast<double>(i) / 24000.0;
    wave[i] = static_cast<float>(0.3 * std::sin(2 * M_PI * 220 * t) + 0.2 * std::sin(2 * M_PI * (300 + 400 * t) * t));
  }
  SpeechEncoder::Activations a, b;
  const std::vector<int32_t> want = cpu->encode(wave, &a);
  const std::vector<int32_t> got = gpu->encode(wave, &b);
  EXPECT_LT(relative_diff(b.convolutions, a.convolutions), 1e-4);
  EXPECT_LT(relative_diff(b.transformer, a.transformer), 1e-4);
  EXPECT_LT(relative_diff(b.downsampled, a.downsampled), 1e-4);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(got.size(), 38u * 16u);
  // The first codebook (semantic) sees the encoder's output directly; later ones the residuals.
  size_t mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] != want[i];
  EXPECT_EQ(mismatches, 0u) << "of " << got.size() << " codes";
}

}  // namespace
}  // namespace omni::model::qwen3_tts
