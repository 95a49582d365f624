// The Qwen3-TTS codec decoder against the float64 reference of
// scripts/reference/qwen3_tts_codec_reference.py (tests/data/tiny_qwen3_tts_codec), streaming
// against one-shot decoding, and the random-weight writer.
#include "model/qwen3_tts/codec_decoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "model/qwen3_tts/random_codec.h"
#include "support/temp_dir.h"
#include "support/waveform_error.h"
#include "tensor/npy.h"

namespace omni::model::qwen3_tts {
namespace {

const std::filesystem::path kFixture = std::filesystem::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_tts_codec";

std::vector<int32_t> fixture_codes() {
  const tensor::Tensor codes = tensor::load_npy(kFixture / "codes.npy");
  return {codes.data<int32_t>(), codes.data<int32_t>() + codes.numel()};
}

// Decodes `codes` in chunks of the given frame counts (cycled) through one stream.
std::vector<float> decode_in_chunks(const CodecDecoder& decoder, const std::vector<int32_t>& codes,
                                    const std::vector<int>& chunks) {
  const size_t width = static_cast<size_t>(decoder.codes_per_frame());
  auto stream = decoder.open_stream();
  std::vector<float> audio;
  size_t at = 0;
  for (size_t i = 0; at < codes.size(); ++i) {
    const size_t n = std::min(codes.size() - at, chunks[i % chunks.size()] * width);
    decoder.decode(*stream, std::span(codes).subspan(at, n), audio);
    at += n;
  }
  EXPECT_EQ(stream->frames(), static_cast<int64_t>(codes.size() / width));
  return audio;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CodecDecoderTest, MatchesTheFloat64ReferenceOnTinyWeights) {
  auto decoder = CodecDecoder::load(kFixture / "speech_tokenizer");
  EXPECT_EQ(decoder->samples_per_frame(), 1920);
  EXPECT_EQ(decoder->sample_rate(), 24000);
  EXPECT_EQ(decoder->codes_per_frame(), 16);
  const std::vector<int32_t> codes = fixture_codes();
  const tensor::Tensor want = tensor::load_npy(kFixture / "waveform.npy");
  const std::vector<float> got = decoder->decode(codes);
  ASSERT_EQ(static_cast<int64_t>(got.size()), want.numel());
  ASSERT_EQ(got.size(), codes.size() / 16 * 1920);
  const testing::WaveformError e = testing::waveform_error(got, std::span(want.data<float>(), got.size()));
  // float32 through ~40 layers against float64: the error is a few 1e-6 of the peak.
  EXPECT_LT(e.worst, 1e-4 * e.peak) << "sample " << e.at << ": got " << got[e.at] << ", want "
                                    << want.data<float>()[e.at] << " (peak " << e.peak << ")";
  RecordProperty("max_error_relative_to_peak", std::to_string(e.worst / e.peak));
}

TEST(CodecDecoderTest, StreamingInAnyChunkingEqualsOneShotBitForBit) {
  auto decoder = CodecDecoder::load(kFixture / "speech_tokenizer");
  const std::vector<int32_t> codes = fixture_codes();
  const std::vector<float> whole = decoder->decode(codes);
  // The fixture's window is 8 frames, so every chunking below crosses it.
  for (const std::vector<int>& chunks : std::vector<std::vector<int>>{{1}, {2, 3}, {1, 5}, {7}, {13, 1}, {23}}) {
    EXPECT_TRUE(bitwise_equal(decode_in_chunks(*decoder, codes, chunks), whole))
        << "chunks of " << chunks[0] << (chunks.size() > 1 ? ", " + std::to_string(chunks[1]) + "…" : "");
  }
}

TEST(CodecDecoderTest, InterleavedStreamsDoNotAffectEachOther) {
  auto decoder = CodecDecoder::load(kFixture / "speech_tokenizer");
  const std::vector<int32_t> a = fixture_codes();
  std::vector<int32_t> b(a.rbegin(), a.rend());
  auto sa = decoder->open_stream(), sb = decoder->open_stream();
  std::vector<float> audio_a, audio_b;
  for (size_t at = 0; at < a.size(); at += 3 * 16) {
    const size_t n = std::min<size_t>(3 * 16, a.size() - at);
    decoder->decode(*sa, std::span(a).subspan(at, n), audio_a);
    decoder->decode(*sb, std::span(b).subspan(at, n), audio_b);
  }
  EXPECT_TRUE(bitwise_equal(audio_a, decoder->decode(a)));
  EXPECT_TRUE(bitwise_equal(audio_b, decoder->decode(b)));
}

TEST(CodecDecoderTest, CodesOutsideTheCodebookAreRefusedAndLeaveTheStreamAsItWas) {
  auto decoder = CodecDecoder::load(kFixture / "speech_tokenizer");
  const std::vector<int32_t> codes = fixture_codes();
  std::vector<int32_t> bad(codes.begin() + 32, codes.begin() + 64);
  bad[16 + 5] = 2048;
  auto stream = decoder->open_stream();
  std::vector<float> audio;
  decoder->decode(*stream, std::span(codes).first(32), audio);
  try {
    decoder->decode(*stream, bad, audio);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("code 2048 of codebook 5 in frame 3 is outside [0, 2048)"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(stream->frames(), 2);
  decoder->decode(*stream, std::span(codes).subspan(32), audio);
  EXPECT_TRUE(bitwise_equal(audio, decoder->decode(codes)));
  EXPECT_THROW(decoder->decode(*stream, std::span(codes).first(15), audio), Error);
}

// Streams decoded together share every layer call; on the CPU each gets its lone samples bit for
// bit, whatever the other streams' positions and chunk sizes (a first chunk of 1 next to chunks
// of 3 and 7, streams that start late).
TEST(CodecDecoderTest, BatchedStreamsEachGetTheirOneShotSamples) {
  auto decoder = CodecDecoder::load(kFixture / "speech_tokenizer");
  const std::vector<int32_t> a = fixture_codes();
  const std::vector<int32_t> b(a.rbegin(), a.rend());
  constexpr std::ptrdiff_t kFiveFrames = 5 * 16;
  std::vector<int32_t> c(a.begin() + kFiveFrames, a.end());
  c.insert(c.end(), a.begin(), a.begin() + kFiveFrames);
  const std::vector<const std::vector<int32_t>*> codes = {&a, &b, &c};
  const std::vector<size_t> chunk = {1, 3, 7};
  std::vector<std::unique_ptr<AudioDecoderStream>> streams;
  for (size_t s = 0; s < 3; ++s) streams.push_back(decoder->open_stream());
  std::vector<std::vector<float>> audio(3);
  std::vector<size_t> at(3, 0);
  for (int step = 0; at[0] < a.size() || at[1] < b.size() || at[2] < c.size(); ++step) {
    std::vector<AudioDecodeItem> items;
    for (size_t s = 0; s < 3; ++s) {
      if (s == 2 && step < 2) continue;  // the third stream joins later
      const size_t n = std::min(codes[s]->size() - at[s], chunk[s] * 16);
      items.push_back({streams[s].get(), std::span(*codes[s]).subspan(at[s], n), &audio[s]});
      at[s] += n;
    }
    decoder->decode_batch(items);
  }
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(streams[s]->frames(), static_cast<int64_t>(codes[s]->size() / 16));
    EXPECT_TRUE(bitwise_equal(audio[s], decoder->decode(*codes[s]))) << "stream " << s;
  }
}

// A batch with an undecodable item names it and moves no stream.
TEST(CodecDecoderTest, ABatchWithBadCodesNamesTheItemAndMovesNoStream) {
  auto decoder = CodecDecoder::load(kFixture / "speech_tokenizer");
  const std::vector<int32_t> codes = fixture_codes();
  std::vector<int32_t> bad(codes.begin(), codes.begin() + 32);
  bad[16 + 2] = 4096;
  auto good_stream = decoder->open_stream(), bad_stream = decoder->open_stream();
  std::vector<float> good_audio, bad_audio;
  const std::vector<AudioDecodeItem> items = {{good_stream.get(), std::span(codes).first(32), &good_audio},
                                              {bad_stream.get(), bad, &bad_audio}};
  try {
    decoder->decode_batch(items);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("item 1: code 4096 of codebook 2 in frame 1 is outside [0, 2048)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(good_stream->frames(), 0);
  EXPECT_TRUE(good_audio.empty());
  const std::vector<AudioDecodeItem> twice = {{good_stream.get(), std::span(codes).first(16), &good_audio},
                                              {good_stream.get(), std::span(codes).subspan(16, 16), &good_audio}};
  EXPECT_THROW(decoder->decode_batch(twice), Error);
  EXPECT_EQ(good_stream->frames(), 0);
}

TEST(CodecDecoderTest, NegativeCodesDecodeAsCodeZero) {
  auto decoder = CodecDecoder::load(kFixture / "speech_tokenizer");
  std::vector<int32_t> codes = fixture_codes();
  codes.resize(4 * 16);
  std::vector<int32_t> padded = codes;
  codes[2 * 16 + 7] = 0;
  padded[2 * 16 + 7] = -1;
  EXPECT_TRUE(bitwise_equal(decoder->decode(padded), decoder->decode(codes)));
}

TEST(CodecDecoderTest, LoadErrorsNameTheFileAndTheTensor) {
  testing::TempDir dir;
  std::filesystem::copy(kFixture / "speech_tokenizer", dir.path(), std::filesystem::copy_options::recursive);
  std::string config = read_text_file(dir.path() / "config.json");
  const std::string rate = "\"decode_upsample_rate\": 1920";
  ASSERT_NE(config.find(rate), std::string::npos);
  dir.write("config.json", config.replace(config.find(rate), rate.size(), "\"decode_upsample_rate\": 960"));
  try {
    CodecDecoder::load(dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLoadFailed);
    EXPECT_NE(std::string(e.what()).find("config.json: decode_upsample_rate 960 differs from the 1920 samples"),
              std::string::npos)
        << e.what();
  }
  testing::TempDir other;
  CodecDecoderConfig shapes = small_codec_shapes();
  write_random_codec_checkpoint(other.path(), shapes, 1);
  shapes.num_hidden_layers = 3;  // the config now asks for a layer the weights do not have
  other.write("config.json", codec_config_json(shapes).dump());
  try {
    CodecDecoder::load(other.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLoadFailed);
    EXPECT_NE(std::string(e.what()).find("decoder.pre_transformer.layers.2.input_layernorm.weight"), std::string::npos)
        << e.what();
  }
}

// The writer's checkpoint loads, has the real frame geometry and window, decodes to audible
// audio mostly inside (-1, 1), streams exactly past the 72-frame window, and is the same for a seed.
TEST(RandomCodecTest, WritesALoadableCheckpointThatStreamsExactlyPastTheWindow) {
  testing::TempDir dir;
  write_random_codec_checkpoint(dir.path() / "a", small_codec_shapes(), 7);
  auto decoder = CodecDecoder::load(dir.path() / "a");
  EXPECT_EQ(decoder->config().sliding_window, 72);
  EXPECT_EQ(decoder->samples_per_frame(), 1920);
  std::mt19937 rng(3);
  std::vector<int32_t> codes(90 * 16);
  for (int32_t& c : codes) c = static_cast<int32_t>(rng() % 2048);
  const std::vector<float> whole = decoder->decode(codes);
  ASSERT_EQ(whole.size(), 90u * 1920);
  double energy = 0.0;
  size_t clipped = 0;
  for (float s : whole) energy += double{s} * s, clipped += std::abs(s) >= 1.0f;
  const double rms = std::sqrt(energy / whole.size());
  EXPECT_GT(rms, 0.01);
  EXPECT_LT(clipped, whole.size() / 100);
  EXPECT_TRUE(bitwise_equal(decode_in_chunks(*decoder, codes, {1, 25}), whole));

  write_random_codec_checkpoint(dir.path() / "b", small_codec_shapes(), 7);
  EXPECT_EQ(read_text_file(dir.path() / "a/model.safetensors"), read_text_file(dir.path() / "b/model.safetensors"));
  EXPECT_EQ(read_text_file(dir.path() / "a/config.json"), read_text_file(dir.path() / "b/config.json"));
}

}  // namespace
}  // namespace omni::model::qwen3_tts
