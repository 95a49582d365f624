// The audio encoders, read back with FFmpeg: every format in both modes decodes at the right rate
// and channel count and length, the lossless ones to exactly the samples given, the lossy ones to
// the same tone; the bytes do not depend on how the samples were split; a stream and a file of
// the same samples differ at most in the fields that need the total length.
#include "media/audio_encoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "media/aac_encoder.h"
#include "media/audio_decoder.h"
#include "media/pcm16.h"
#include "media/wav_encoder.h"

namespace omni::media {
namespace {


constexpr int kRate = 24000;
constexpr int kSamplesPerFrame = 1920;  // one Qwen3-TTS codec frame, 80 ms
constexpr double kToneHz = 440.0;

std::vector<float> tone(size_t count, double hz = kToneHz, int rate = kRate, double amplitude = 0.5) {
  std::vector<float> samples(count);
  for (size_t i = 0; i < count; ++i) {
    samples[i] = static_cast<float>(amplitude * std::sin(2 * std::numbers::pi * hz * static_cast<double>(i) / rate));
  }
  return samples;
}

// Encodes `samples` in pieces of random sizes (fixed seed; one piece when `seed` is 0).
std::string encode(AudioFormat format, const std::vector<float>& samples, bool streaming, uint32_t seed = 0) {
  auto encoder = make_audio_encoder(format, {kRate, streaming});
  std::string out;
  std::mt19937 rng(seed);
  size_t at = 0;
  while (at < samples.size()) {
    size_t piece = seed == 0 ? samples.size() : std::uniform_int_distribution<size_t>(0, 3000)(rng);
    piece = std::min(piece, samples.size() - at);
    out += encoder->encode(std::span<const float>(samples).subspan(at, piece));
    at += piece;
  }
  out += encoder->finish();
  return out;
}

// The share of the signal's energy at `hz` (Goertzel), 1.0 for a pure tone of that frequency.
double tone_fraction(const std::vector<float>& samples, double hz, int rate) {
  double energy = 0;
  double re = 0;
  double im = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    double phase = 2 * std::numbers::pi * hz * static_cast<double>(i) / rate;
    re += samples[i] * std::cos(phase);
    im += samples[i] * std::sin(phase);
    energy += static_cast<double>(samples[i]) * samples[i];
  }
  if (energy == 0) return 0;
  return 2 * (re * re + im * im) / (static_cast<double>(samples.size()) * energy);
}

double rms(const std::vector<float>& samples) {
  double sum = 0;
  for (float s : samples) sum += static_cast<double>(s) * s;
  return std::sqrt(sum / static_cast<double>(samples.size()));
}

uint32_t u32_le(const std::string& bytes, size_t at) {
  uint32_t value = 0;
  for (int i = 3; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(bytes[at + static_cast<size_t>(i)]);
  return value;
}

// FLAC STREAMINFO (right after "fLaC" and the 4-byte block header): total samples, 36 bits.
uint64_t flac_total_samples(const std::string& bytes) {
  const auto* info = reinterpret_cast<const uint8_t*>(bytes.data()) + 8;
  uint64_t total = info[13] & 0x0F;
  for (int i = 14; i < 18; ++i) total = (total << 8) | info[i];
  return total;
}
constexpr size_t kFlacStreamInfoEnd = 4 + 4 + 34;

// Equal bytes, or where they first differ (binary output is useless in a failure message).
::testing::AssertionResult same_bytes(const std::string& a, const std::string& b) {
  if (a == b) return ::testing::AssertionSuccess();
  size_t at = 0;
  while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
  return ::testing::AssertionFailure() << "sizes " << a.size() << " and " << b.size() << ", first difference at byte "
                                       << at;
}

struct Case {
  AudioFormat format;
  bool streaming;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(audio_format_name(info.param.format)) + (info.param.streaming ? "_stream" : "_file");
}

class EncoderRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(EncoderRoundTrip, DecodesToTheToneAtTheRateAndLength) {
  const auto [format, streaming] = GetParam();
  const size_t n = 15 * kSamplesPerFrame;  // 1.2 s
  const std::vector<float> input = tone(n);
  const std::string bytes = encode(format, input, streaming, 7);
  ASSERT_FALSE(bytes.empty());

  if (format == AudioFormat::kPcm) {
    ASSERT_EQ(bytes.size(), 2 * n);
    for (size_t i = 0; i < n; ++i) {
      int16_t value;
      std::memcpy(&value, bytes.data() + 2 * i, 2);
      ASSERT_EQ(value, to_pcm16(input[i])) << "sample " << i;
    }
    return;
  }

  const DecodedAudio audio = decode_audio(bytes);
  EXPECT_EQ(audio.channels, 1);
  const bool lossless = format == AudioFormat::kWav || format == AudioFormat::kFlac;
  if (lossless) {
    EXPECT_EQ(audio.sample_rate, kRate);
    ASSERT_EQ(audio.samples.size(), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::lrint(audio.samples[i] * 32768.0f), to_pcm16(input[i])) << "sample " << i;
    }
    return;
  }
  size_t expected = n;
  int rate = kRate;
  size_t slack = 0;  // decoders keep the codec's delay and padding when the stream does not say it
  switch (format) {
    case AudioFormat::kMp3:
      EXPECT_EQ(audio.container, "mp3");
      slack = 3 * 1152;
      break;
    case AudioFormat::kAac:
      EXPECT_EQ(audio.container, "aac");
      slack = 3 * 1024;
      break;
    case AudioFormat::kOpus: {
      EXPECT_EQ(audio.container, "ogg");
      EXPECT_EQ(audio.codec, "opus");
      // Opus decodes at 48 kHz; the header records the rate it was given.
      rate = 48000;
      expected = 2 * n;
      slack = 960;
      size_t head = bytes.find("OpusHead");
      ASSERT_NE(head, std::string::npos);
      EXPECT_EQ(u32_le(bytes, head + 12), static_cast<uint32_t>(kRate));
      break;
    }
    default:
      FAIL();
  }
  EXPECT_EQ(audio.sample_rate, rate);
  EXPECT_GE(audio.samples.size() + slack / 4, expected);
  EXPECT_LE(audio.samples.size(), expected + slack);
  EXPECT_GT(tone_fraction(audio.samples, kToneHz, rate), 0.9);
  EXPECT_NEAR(rms(audio.samples) * std::sqrt(static_cast<double>(audio.samples.size()) / expected), rms(input),
              0.1 * rms(input));
}

TEST_P(EncoderRoundTrip, BytesDoNotDependOnHowSamplesAreSplit) {
  const auto [format, streaming] = GetParam();
  const std::vector<float> input = tone(10 * kSamplesPerFrame + 123, 300.0);
  const std::string whole = encode(format, input, streaming);
  EXPECT_TRUE(same_bytes(encode(format, input, streaming, 1), whole));
  EXPECT_TRUE(same_bytes(encode(format, input, streaming, 2), whole));
}

INSTANTIATE_TEST_SUITE_P(AllFormats, EncoderRoundTrip,
                         ::testing::Values(Case{AudioFormat::kWav, false}, Case{AudioFormat::kWav, true},
                                           Case{AudioFormat::kPcm, false}, Case{AudioFormat::kPcm, true},
                                           Case{AudioFormat::kFlac, false}, Case{AudioFormat::kFlac, true},
                                           Case{AudioFormat::kMp3, false}, Case{AudioFormat::kMp3, true},
                                           Case{AudioFormat::kOpus, false}, Case{AudioFormat::kOpus, true},
                                           Case{AudioFormat::kAac, false}, Case{AudioFormat::kAac, true}),
                         case_name);

TEST(AudioEncoder, StreamingReleasesBytesBeforeTheEnd) {
  const std::vector<float> input = tone(kRate);  // 1 s, pushed a codec frame (80 ms) at a time
  for (AudioFormat format : audio_formats()) {
    auto encoder = make_audio_encoder(format, {kRate, true});
    std::string early;
    for (size_t at = 0; at < input.size(); at += kSamplesPerFrame) {
      early += encoder->encode(
          std::span<const float>(input).subspan(at, std::min<size_t>(kSamplesPerFrame, input.size() - at)));
    }
    const std::string rest = encoder->finish();
    // Most of the second is out before finish(): the codecs hold back at most a few frames.
    EXPECT_GT(early.size(), 2 * rest.size()) << audio_format_name(format);
  }
}

TEST(AudioEncoder, StreamEqualsFileExceptTheLengthFields) {
  const size_t n = 7 * kSamplesPerFrame;
  const std::vector<float> input = tone(n, 523.25);
  for (AudioFormat format : audio_formats()) {
    SCOPED_TRACE(std::string(audio_format_name(format)));
    const std::string stream = encode(format, input, true, 3);
    const std::string file = encode(format, input, false);
    ASSERT_EQ(stream.size(), file.size());
    if (format == AudioFormat::kWav) {
      EXPECT_EQ(u32_le(stream, 4), 0xFFFFFFFFu);
      EXPECT_EQ(u32_le(stream, 40), 0xFFFFFFFFu);
      EXPECT_EQ(u32_le(file, 4), 36 + 2 * n);
      EXPECT_EQ(u32_le(file, 40), 2 * n);
      EXPECT_TRUE(same_bytes(stream.substr(44), file.substr(44)));
    } else if (format == AudioFormat::kFlac) {
      EXPECT_EQ(flac_total_samples(stream), 0u);
      EXPECT_EQ(flac_total_samples(file), n);
      EXPECT_TRUE(same_bytes(stream.substr(kFlacStreamInfoEnd), file.substr(kFlacStreamInfoEnd)));
    } else {
      EXPECT_TRUE(same_bytes(stream, file));
    }
  }
}

TEST(AudioEncoder, WavHeaderDescribesSixteenBitMono) {
  const std::string header = wav_header(kRate, 2 * 1920);
  ASSERT_EQ(header.size(), 44u);
  EXPECT_EQ(header.substr(0, 4), "RIFF");
  EXPECT_EQ(header.substr(8, 8), "WAVEfmt ");
  EXPECT_EQ(u32_le(header, 24), static_cast<uint32_t>(kRate));
  EXPECT_EQ(u32_le(header, 28), static_cast<uint32_t>(2 * kRate));  // bytes per second
  EXPECT_EQ(header[22], 1);                                         // channels
  EXPECT_EQ(header[34], 16);                                        // bits per sample
  EXPECT_EQ(header.substr(36, 4), "data");
  EXPECT_EQ(u32_le(header, 40), 2u * 1920);
}

TEST(AudioEncoder, EmptyInputIsAValidEmptyFile) {
  for (bool streaming : {false, true}) {
    auto encoder = make_audio_encoder(AudioFormat::kWav, {kRate, streaming});
    const std::string bytes = encoder->finish();
    ASSERT_EQ(bytes.size(), 44u);
    const DecodedAudio audio = decode_audio(bytes);
    EXPECT_EQ(audio.sample_rate, kRate);
    EXPECT_TRUE(audio.samples.empty());
  }
  EXPECT_EQ(make_audio_encoder(AudioFormat::kPcm, {kRate, true})->finish(), "");
  // FLAC and Opus without audio are their headers alone.
  EXPECT_EQ(make_audio_encoder(AudioFormat::kFlac, {kRate, true})->finish().substr(0, 4), "fLaC");
  EXPECT_EQ(make_audio_encoder(AudioFormat::kOpus, {kRate, true})->finish().substr(0, 4), "OggS");
}

TEST(AudioEncoder, ClipsOutOfRangeSamplesAndReadsNanAsZero) {
  const std::vector<float> input = {2.0f, -2.0f, std::nanf(""), 1.0f, -1.0f, 0.25f};
  const std::string bytes = encode(AudioFormat::kPcm, input, false);
  const std::vector<int16_t> expected = {32767, -32767, 0, 32767, -32767, 8192};
  ASSERT_EQ(bytes.size(), 2 * expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    int16_t value;
    std::memcpy(&value, bytes.data() + 2 * i, 2);
    EXPECT_EQ(value, expected[i]) << "sample " << i;
  }
  // The lossy encoders get the same clipped signal: a full-scale square wave stays full scale.
  std::vector<float> loud(kRate / 2);
  for (size_t i = 0; i < loud.size(); ++i) loud[i] = (i / 60) % 2 ? 3.0f : -3.0f;
  const DecodedAudio audio = decode_audio(encode(AudioFormat::kMp3, loud, false));
  EXPECT_LT(rms(audio.samples), 1.05);
}

TEST(AudioEncoder, AdtsHeaderFields) {
  const std::string header = adts_header(24000, 100);
  ASSERT_EQ(header.size(), 7u);
  const auto* h = reinterpret_cast<const uint8_t*>(header.data());
  EXPECT_EQ(h[0], 0xFF);
  EXPECT_EQ(h[1] & 0xF6, 0xF0);                   // sync, MPEG-4, layer 0
  EXPECT_EQ(h[2] >> 6, 1);                        // AAC-LC (object type 2)
  EXPECT_EQ((h[2] >> 2) & 0xF, 6);                // 24000 Hz
  EXPECT_EQ(((h[2] & 1) << 2) | (h[3] >> 6), 1);  // mono
  EXPECT_EQ(((h[3] & 3) << 11) | (h[4] << 3) | (h[5] >> 5), 107);
}

TEST(AudioEncoder, ErrorsNameTheFormatAndTheValue) {
  try {
    audio_format_from_name("ogg");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "unknown audio format 'ogg'; allowed: wav, pcm, flac, mp3, opus, aac");
  }
  for (AudioFormat format : {AudioFormat::kMp3, AudioFormat::kAac}) {
    try {
      make_audio_encoder(format, {23000, false});
      FAIL() << audio_format_name(format);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("sample rate 23000"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(audio_format_name(format)), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(make_audio_encoder(AudioFormat::kWav, {0, false}), Error);
  for (AudioFormat format : audio_formats()) {
    auto encoder = make_audio_encoder(format, {kRate, true});
    encoder->finish();
    EXPECT_THROW(encoder->finish(), Error) << audio_format_name(format);
    EXPECT_THROW(encoder->encode(std::vector<float>(10)), Error) << audio_format_name(format);
  }
}

TEST(AudioEncoder, NamesAndContentTypes) {
  for (AudioFormat format : audio_formats()) EXPECT_EQ(audio_format_from_name(audio_format_name(format)), format);
  EXPECT_EQ(audio_content_type(AudioFormat::kWav), "audio/wav");
  EXPECT_EQ(audio_content_type(AudioFormat::kMp3), "audio/mpeg");
  EXPECT_EQ(audio_content_type(AudioFormat::kOpus), "audio/ogg");
  EXPECT_EQ(audio_content_type(AudioFormat::kAac), "audio/aac");
  EXPECT_EQ(audio_content_type(AudioFormat::kFlac), "audio/flac");
  EXPECT_EQ(audio_content_type(AudioFormat::kPcm), "audio/pcm");
}

}  // namespace
}  // namespace omni::media
