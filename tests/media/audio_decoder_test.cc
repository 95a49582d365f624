// media::decode_audio and resample_audio: what our encoders write decodes back (lossless formats
// exactly), stereo becomes the mean of its channels, 8-bit and 32-bit integer samples scale to
// [-1, 1], bad bytes and media over the limits are clear errors, and soxr resampling keeps the
// tone and yields ceil(n * to / from) samples.
#include "media/audio_decoder.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numbers>
#include <string>
#include <vector>

#include "base/error.h"
#include "media/audio_encoder.h"

namespace omni::media {
namespace {

std::vector<float> tone(size_t count, double hz, int rate, double amplitude = 0.5) {
  std::vector<float> samples(count);
  for (size_t i = 0; i < count; ++i) {
    samples[i] = static_cast<float>(amplitude * std::sin(2 * std::numbers::pi * hz * static_cast<double>(i) / rate));
  }
  return samples;
}

std::string encode(AudioFormat format, const std::vector<float>& samples, int rate) {
  auto encoder = make_audio_encoder(format, {rate, false});
  std::string out = encoder->encode(samples);
  return out + encoder->finish();
}

// A canonical RIFF/WAVE file of interleaved integer samples.
std::string wav_file(int rate, int channels, int bits, const std::string& data) {
  auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  auto u16 = [](uint16_t v) { return std::string(reinterpret_cast<const char*>(&v), 2); };
  const int block = channels * bits / 8;
  return "RIFF" + u32(static_cast<uint32_t>(36 + data.size())) + "WAVEfmt " + u32(16) + u16(1) +
         u16(static_cast<uint16_t>(channels)) + u32(static_cast<uint32_t>(rate)) +
         u32(static_cast<uint32_t>(rate * block)) + u16(static_cast<uint16_t>(block)) +
         u16(static_cast<uint16_t>(bits)) + "data" + u32(static_cast<uint32_t>(data.size())) + data;
}

// The share of the signal's energy at `hz` (Goertzel), 1.0 for a pure tone of that frequency.
double tone_fraction(const std::vector<float>& samples, double hz, int rate) {
  double re = 0, im = 0, energy = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    double phase = 2 * std::numbers::pi * hz * static_cast<double>(i) / rate;
    re += samples[i] * std::cos(phase);
    im += samples[i] * std::sin(phase);
    energy += static_cast<double>(samples[i]) * samples[i];
  }
  return 2 * (re * re + im * im) / (static_cast<double>(samples.size()) * energy);
}

TEST(AudioDecoder, LosslessFormatsDecodeToTheSamplesGiven) {
  const std::vector<float> samples = tone(4800, 440, 24000);
  for (AudioFormat format : {AudioFormat::kWav, AudioFormat::kFlac}) {
    DecodedAudio audio = decode_audio(encode(format, samples, 24000));
    EXPECT_EQ(audio.sample_rate, 24000) << audio_format_name(format);
    EXPECT_EQ(audio.channels, 1);
    ASSERT_EQ(audio.samples.size(), samples.size()) << audio_format_name(format);
    for (size_t i = 0; i < samples.size(); ++i) ASSERT_NEAR(audio.samples[i], samples[i], 1.0 / 32768) << i;
    EXPECT_DOUBLE_EQ(audio.seconds(), 0.2);
  }
}

TEST(AudioDecoder, LossyFormatsKeepTheTone) {
  const std::vector<float> samples = tone(24000, 440, 24000);
  for (AudioFormat format : {AudioFormat::kMp3, AudioFormat::kOpus, AudioFormat::kAac}) {
    DecodedAudio audio = decode_audio(encode(format, samples, 24000));
    EXPECT_GT(audio.samples.size(), 0u) << audio_format_name(format);
    EXPECT_GT(tone_fraction(audio.samples, 440, audio.sample_rate), 0.9)
        << audio_format_name(format) << " " << audio.container << "/" << audio.codec;
  }
}

TEST(AudioDecoder, StereoIsTheMeanOfItsChannels) {
  std::string data;
  for (int16_t left : {1000, -2000, 16384}) {
    int16_t right = static_cast<int16_t>(-left / 2);
    data.append(reinterpret_cast<const char*>(&left), 2).append(reinterpret_cast<const char*>(&right), 2);
  }
  DecodedAudio audio = decode_audio(wav_file(16000, 2, 16, data));
  EXPECT_EQ(audio.channels, 2);
  EXPECT_EQ(audio.container, "wav");
  ASSERT_EQ(audio.samples.size(), 3u);
  EXPECT_FLOAT_EQ(audio.samples[0], 250.0f / 32768);
  EXPECT_FLOAT_EQ(audio.samples[1], -500.0f / 32768);
  EXPECT_FLOAT_EQ(audio.samples[2], 4096.0f / 32768);
}

TEST(AudioDecoder, IntegerWidthsScaleToUnitRange) {
  DecodedAudio u8 = decode_audio(wav_file(8000, 1, 8, std::string("\x00\x80\xc0", 3)));
  ASSERT_EQ(u8.samples.size(), 3u);
  EXPECT_FLOAT_EQ(u8.samples[0], -1.0f);
  EXPECT_FLOAT_EQ(u8.samples[1], 0.0f);
  EXPECT_FLOAT_EQ(u8.samples[2], 0.5f);
  int32_t half = 1 << 30;
  DecodedAudio s32 = decode_audio(wav_file(8000, 1, 32, std::string(reinterpret_cast<const char*>(&half), 4)));
  ASSERT_EQ(s32.samples.size(), 1u);
  EXPECT_FLOAT_EQ(s32.samples[0], 0.5f);
}

void expect_error(const std::string& bytes, const AudioDecodeLimits& limits, const std::string& fragment) {
  try {
    decode_audio(bytes, limits);
    ADD_FAILURE() << "no error; expected one containing: " << fragment;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(AudioDecoder, BadBytesAndOversizedMediaAreClearErrors) {
  expect_error("", {}, "empty");
  expect_error(std::string(1000, 'x'), {}, "not an audio file FFmpeg can read");
  const std::string wav = encode(AudioFormat::kWav, tone(16000, 440, 16000), 16000);
  expect_error(wav, {.max_bytes = 1000}, "the limit is 1000 bytes");
  expect_error(wav, {.max_seconds = 0.5}, "longer than the limit of 0.5 s");
  expect_error(wav.substr(0, 30), {}, "");  // a truncated header: an error, whatever FFmpeg says
  EXPECT_EQ(decode_audio(wav, {.max_seconds = 1.0}).samples.size(), 16000u);
}

// A header may claim any rate; with max_seconds the rate bounds what one decode may allocate.
TEST(AudioDecoder, SampleRatesPastTheLimitAreClearErrors) {
  const std::string samples(400, '\x10');
  expect_error(wav_file(2000000, 1, 16, samples), {},
               "the audio's sample rate of 2000000 Hz is above the limit of 384000 Hz");
  expect_error(wav_file(48000, 1, 16, samples), {.max_sample_rate = 44100},
               "the audio's sample rate of 48000 Hz is above the limit of 44100 Hz");
  EXPECT_EQ(decode_audio(wav_file(384000, 1, 16, samples)).sample_rate, 384000);
}

// A client's bytes are decoded alone: a playlist that names a file on this machine is not followed
// (FFmpeg's HLS demuxer would open it), so it cannot be used to read local files.
// A WAV file whose LIST chunk claims 2 GiB, so that FFmpeg's RIFF INFO reader takes what follows
// for tags and zero-allocates (so touches) a "tag" of 1.7 GiB that a size field read from the
// file's bytes claims: the audio_decoder fuzzer's input
// (tests/fuzz/regressions/audio_decoder/wav-riff-info-1.7gib-tag). It touched 1.7 GiB per request before decode_audio
// capped FFmpeg's allocations at 256 MiB; now the allocation is refused, the tag dropped, and the process's peak RSS
// grows by far less.
TEST(AudioDecoder, HeadersClaimingHugeTagsDoNotAllocateThem) {
  std::ifstream in(
      std::filesystem::path(OMNI_SOURCE_DIR) / "tests/fuzz/regressions/audio_decoder/wav-riff-info-1.7gib-tag",
      std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(file.substr(0, 4), "RIFF");
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  try {
    decode_audio(file);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 512 * 1024) << "KiB of peak RSS added";
}

TEST(AudioDecoder, PlaylistsCannotOpenOtherFiles) {
  const std::filesystem::path wav = std::filesystem::temp_directory_path() / "omni-audio-decoder-test-segment.wav";
  {
    std::ofstream out(wav, std::ios::binary);
    out << encode(AudioFormat::kWav, tone(16000, 440, 16000), 16000);
  }
  for (const std::string& url : {wav.string(), "file://" + wav.string()}) {
    const std::string playlist = "#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\n" + url + "\n#EXT-X-ENDLIST\n";
    try {
      const DecodedAudio audio = decode_audio(playlist);
      EXPECT_TRUE(audio.samples.empty()) << "the playlist's segment " << url << " was read";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
  }
  std::filesystem::remove(wav);
}

TEST(AudioResampler, KeepsTheToneAtTheNewRate) {
  const std::vector<float> samples = tone(24001, 440, 24000);
  std::vector<float> out = resample_audio(samples, 24000, 16000);
  EXPECT_EQ(out.size(), 16001u);  // ceil(24001 * 2 / 3)
  EXPECT_GT(tone_fraction(std::vector<float>(out.begin() + 100, out.end() - 100), 440, 16000), 0.999);
  double peak = 0;
  for (size_t i = 100; i + 100 < out.size(); ++i) peak = std::max(peak, std::abs(static_cast<double>(out[i])));
  EXPECT_NEAR(peak, 0.5, 0.01);
  EXPECT_EQ(resample_audio(samples, 16000, 16000), samples);
  EXPECT_THROW(resample_audio(samples, 0, 16000), Error);
}

TEST(AudioResampler, DecodeAtResamples) {
  const std::string wav = encode(AudioFormat::kWav, tone(44100, 1000, 44100), 44100);
  std::vector<float> out = decode_audio_at(wav, 16000);
  EXPECT_EQ(out.size(), 16000u);
  EXPECT_GT(tone_fraction(std::vector<float>(out.begin() + 100, out.end() - 100), 1000, 16000), 0.999);
}

}  // namespace
}  // namespace omni::media
