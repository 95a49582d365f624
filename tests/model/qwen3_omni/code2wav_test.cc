// The Qwen3-Omni code2wav against the float64 reference of
// scripts/reference/qwen3_omni_code2wav_reference.py (tests/data/tiny_qwen3_omni_code2wav: BF16
// weights as released, a code2wav_config as transformers 5 writes it), streaming and batching
// against one-shot decoding, and the config's errors.
#include "model/qwen3_omni/code2wav.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "model/qwen3_tts/codec_frames.h"
#include "model/stage_model_registry.h"
#include "support/waveform_error.h"
#include "tensor/npy.h"

namespace omni::model::qwen3_omni {
namespace {

const std::filesystem::path kFixture = std::filesystem::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_omni_code2wav";

std::vector<int32_t> fixture_codes() {
  const tensor::Tensor codes = tensor::load_npy(kFixture / "codes.npy");
  return {codes.data<int32_t>(), codes.data<int32_t>() + codes.numel()};
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Qwen3OmniCode2WavTest, ReadsTheConfigAsTransformersWritesIt) {
  auto decoder = load_code2wav(kFixture);
  const qwen3_tts::CodecDecoderConfig& c = decoder->config();
  EXPECT_EQ(c.codebook_size, 128);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.latent_dim, 32);  // no projections around the transformer
  EXPECT_EQ(c.head_dim, 8);     // hidden_size / num_attention_heads
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.rope_theta, 10000.0f);  // from rope_parameters
  EXPECT_EQ(decoder->samples_per_frame(), 1920);
  EXPECT_EQ(decoder->sample_rate(), 24000);
  EXPECT_EQ(decoder->codes_per_frame(), 16);
  EXPECT_EQ(decoder->samples_trimmed(), 555);  // 8 * 60 + 5 * 12 + 4 * 3 + 3
}

TEST(Qwen3OmniCode2WavTest, MatchesTheFloat64ReferenceOnTinyBf16Weights) {
  auto decoder = load_code2wav(kFixture);
  const std::vector<int32_t> codes = fixture_codes();
  const tensor::Tensor want = tensor::load_npy(kFixture / "waveform.npy");
  const std::vector<float> got = decoder->decode(codes);
  ASSERT_EQ(static_cast<int64_t>(got.size()), want.numel());
  ASSERT_EQ(got.size(), codes.size() / 16 * 1920 - 555);
  const testing::WaveformError e = testing::waveform_error(got, std::span(want.data<float>(), got.size()));
  // float32 through ~40 layers against float64: the error is a few 1e-6 of the peak.
  EXPECT_LT(e.worst, 1e-4 * e.peak) << "sample " << e.at << ": got " << got[e.at] << ", want "
                                    << want.data<float>()[e.at] << " (peak " << e.peak << ")";
  RecordProperty("max_error_relative_to_peak", std::to_string(e.worst / e.peak));
}

// Each left-trimmed layer drops its first rows from a stream's first chunk only, so any chunking
// gives the one-shot samples bit for bit; the first chunk is 555 samples short, the others whole.
TEST(Qwen3OmniCode2WavTest, StreamingInAnyChunkingEqualsOneShotBitForBit) {
  auto decoder = load_code2wav(kFixture);
  const std::vector<int32_t> codes = fixture_codes();
  const std::vector<float> whole = decoder->decode(codes);
  for (const std::vector<int>& chunks : std::vector<std::vector<int>>{{1}, {2, 3}, {1, 5}, {7}, {13, 1}, {23}}) {
    auto stream = decoder->open_stream();
    std::vector<float> audio;
    size_t at = 0;
    for (size_t i = 0; at < codes.size(); ++i) {
      const size_t n = std::min(codes.size() - at, static_cast<size_t>(chunks[i % chunks.size()]) * 16);
      const size_t before = audio.size();
      decoder->decode(*stream, std::span(codes).subspan(at, n), audio);
      EXPECT_EQ(audio.size() - before, n / 16 * 1920 - (i == 0 ? 555 : 0)) << "chunk " << i;
      at += n;
    }
    EXPECT_TRUE(bitwise_equal(audio, whole)) << "chunks of " << chunks[0];
  }
}

// Streams decoded together, one starting while the other is midway, each get their lone samples;
// a copied stream continues as its original.
TEST(Qwen3OmniCode2WavTest, BatchedAndCopiedStreamsEachGetTheirOneShotSamples) {
  auto decoder = load_code2wav(kFixture);
  const std::vector<int32_t> a = fixture_codes();
  const std::vector<int32_t> b(a.rbegin(), a.rend());
  auto sa = decoder->open_stream(), sb = decoder->open_stream();
  std::vector<float> audio_a, audio_b;
  decoder->decode(*sa, std::span(a).first(5 * 16), audio_a);
  auto copy = decoder->copy_stream(*sa);
  std::vector<float> audio_copy = audio_a;
  size_t at_a = 5 * 16, at_b = 0;
  while (at_a < a.size() || at_b < b.size()) {
    const size_t na = std::min<size_t>(3 * 16, a.size() - at_a), nb = std::min<size_t>(7 * 16, b.size() - at_b);
    const AudioDecodeItem items[] = {{sa.get(), std::span(a).subspan(at_a, na), &audio_a},
                                     {sb.get(), std::span(b).subspan(at_b, nb), &audio_b}};
    decoder->decode_batch(items);
    at_a += na, at_b += nb;
  }
  decoder->decode(*copy, std::span(a).subspan(5 * 16), audio_copy);
  EXPECT_TRUE(bitwise_equal(audio_a, decoder->decode(a)));
  EXPECT_TRUE(bitwise_equal(audio_b, decoder->decode(b)));
  EXPECT_TRUE(bitwise_equal(audio_copy, audio_a));
}

TEST(Qwen3OmniCode2WavTest, BadCodesNameTheDecoderAndMoveNoStream) {
  auto decoder = load_code2wav(kFixture);
  std::vector<int32_t> codes = fixture_codes();
  codes[16 + 2] = 128;
  auto stream = decoder->open_stream();
  std::vector<float> audio;
  try {
    decoder->decode(*stream, std::span(codes).first(32), audio);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "qwen3_omni code2wav: code 128 of codebook 2 in frame 1 is outside [0, 128)");
  }
  EXPECT_EQ(stream->frames(), 0);
  EXPECT_TRUE(audio.empty());
}

// The pipeline's code2wav stage finds it by name, decodes the talker's frame payloads and tells
// the server its sample rate.
TEST(Qwen3OmniCode2WavTest, IsTheCode2WavStageModel) {
  StageModelArgs args;
  args.model_dir = kFixture;
  args.stage_id = 2;
  std::unique_ptr<StreamingDecoderStage> stage =
      builtin_stage_models().create_generation(std::string(kCode2WavStageModel), args);
  const std::vector<int32_t> codes = fixture_codes();
  EXPECT_EQ(stage->payload_codes(qwen3_tts::encode_codec_frames(codes, 16)), codes);
  auto stream = stage->decoder().open_stream();
  std::vector<float> audio;
  stage->decoder().decode(*stream, codes, audio);
  EXPECT_TRUE(bitwise_equal(audio, load_code2wav(kFixture)->decode(codes)));
  EXPECT_EQ(builtin_stage_models()
                .describe(config::ExecutionType::kLlmGeneration, kCode2WavStageModel, kFixture)
                .audio_sample_rate,
            24000);
}

TEST(Qwen3OmniCode2WavTest, ConfigErrorsNameTheField) {
  auto error_of = [](const Json& config) {
    try {
      parse_code2wav_config(config, "config.json");
      return std::string("no error");
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(error_of(Json::object()), "config.json: missing object 'code2wav_config'");
  EXPECT_EQ(error_of(Json{{"code2wav_config", {{"hidden_size", 30}, {"num_attention_heads", 4}}}}),
            "config.json: code2wav_config.hidden_size 30 is not a positive multiple of num_attention_heads 4");
  EXPECT_EQ(error_of(Json{{"code2wav_config", {{"sliding_window", "72"}}}}),
            "config.json: field 'code2wav_config.sliding_window' has the wrong type (got \"72\")");
  EXPECT_EQ(error_of(Json{{"code2wav_config", {{"num_quantizers", 0}}}}),
            "config.json: field 'code2wav_config.num_quantizers' must be positive, got 0");
  // The released values where the config is silent.
  const qwen3_tts::CodecDecoderConfig released = parse_code2wav_config(Json{{"code2wav_config", Json::object()}}, "c");
  EXPECT_EQ(released.hidden_size, 1024);
  EXPECT_EQ(released.latent_dim, 1024);
  EXPECT_EQ(released.intermediate_size, 3072);
  EXPECT_EQ(released.head_dim, 64);
  EXPECT_EQ(released.decoder_dim, 1536);
  EXPECT_EQ(released.samples_per_frame(), 1920);
}

}  // namespace
}  // namespace omni::model::qwen3_omni
