// The WAV stream meter of `omnistage bench serve --endpoint /v1/audio/speech`: where the samples
// start and how many seconds arrived, whatever the split of the bytes into packets.
#include "cli/bench/wav_stream_meter.h"

#include <gtest/gtest.h>

#include <string>

namespace omni::cli::bench {
namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}
void put_u16(std::string& out, uint16_t v) {
  out += static_cast<char>(v & 0xFF);
  out += static_cast<char>(v >> 8);
}

// A streamed WAV header (unknown sizes), with an optional extra chunk before "data".
std::string header(int rate, int channels, bool extra_chunk) {
  std::string h = "RIFF";
  put_u32(h, 0xFFFFFFFF);
  h += "WAVEfmt ";
  put_u32(h, 16);
  put_u16(h, 1);
  put_u16(h, static_cast<uint16_t>(channels));
  put_u32(h, static_cast<uint32_t>(rate));
  put_u32(h, static_cast<uint32_t>(rate * channels * 2));
  put_u16(h, static_cast<uint16_t>(channels * 2));
  put_u16(h, 16);
  if (extra_chunk) {
    h += "LIST";
    put_u32(h, 3);  // odd: padded to 4
    h += std::string(4, 'x');
  }
  h += "data";
  put_u32(h, 0xFFFFFFFF);
  return h;
}

TEST(WavStreamMeter, CountsSamplesAfterTheHeaderWhateverThePacketSplit) {
  const std::string file = header(24000, 1, true) + std::string(2 * 1920 * 3, '\x01');
  for (size_t packet : {1u, 7u, 44u, 100u, 100000u}) {
    WavStreamMeter meter;
    size_t samples = 0, first_sample_packet = 0, packets = 0;
    for (size_t at = 0; at < file.size(); at += packet) {
      const size_t got = meter.feed(std::string_view(file).substr(at, packet));
      ++packets;
      if (got > 0 && first_sample_packet == 0) first_sample_packet = packets;
      samples += got;
    }
    EXPECT_TRUE(meter.error().empty()) << meter.error();
    EXPECT_TRUE(meter.in_samples());
    EXPECT_EQ(meter.sample_rate(), 24000);
    EXPECT_EQ(samples, 2u * 1920 * 3) << "packet " << packet;
    EXPECT_EQ(meter.sample_bytes(), 2 * 1920 * 3);
    EXPECT_DOUBLE_EQ(meter.seconds(), 3 * 0.08) << "packet " << packet;  // three 80 ms codec frames
    // The first packet with samples is the one past the 56-byte header.
    EXPECT_EQ(first_sample_packet, 56 / packet + 1) << "packet " << packet;
  }
}

TEST(WavStreamMeter, StereoCountsWholeSampleFrames) {
  WavStreamMeter meter;
  meter.feed(header(8000, 2, false) + std::string(4 * 8000 + 3, '\0'));
  EXPECT_DOUBLE_EQ(meter.seconds(), 1.0);
}

TEST(WavStreamMeter, ABodyThatIsNotWavIsAnError) {
  WavStreamMeter meter;
  EXPECT_EQ(meter.feed(std::string(64, '\x7f')), 0u);
  EXPECT_NE(meter.error().find("not a WAV stream"), std::string::npos) << meter.error();
  EXPECT_EQ(meter.seconds(), 0.0);

  std::string float_wav = header(24000, 1, false);
  float_wav[20] = 3;  // WAVE_FORMAT_IEEE_FLOAT
  WavStreamMeter floats;
  floats.feed(float_wav);
  EXPECT_NE(floats.error().find("not 16-bit PCM"), std::string::npos) << floats.error();
}

TEST(WavStreamMeter, NothingCountsBeforeTheDataChunk) {
  WavStreamMeter meter;
  const std::string h = header(24000, 1, false);
  EXPECT_EQ(meter.feed(h.substr(0, 40)), 0u);
  EXPECT_FALSE(meter.in_samples());
  EXPECT_EQ(meter.feed(h.substr(40)), 0u);
  EXPECT_TRUE(meter.in_samples());
  EXPECT_EQ(meter.feed("ab"), 2u);
  EXPECT_DOUBLE_EQ(meter.seconds(), 1.0 / 24000);
}

// Found by the wav_stream fuzzer: a fmt chunk of size 0xFFFFFFFF plus its pad byte wrapped to 0 in
// 32 bits, so its body counted as arrived and the reader read past the 29 bytes given.
TEST(WavStreamMeter, AChunkSizeNearFourGigabytesWaitsForItsBody) {
  using namespace std::string_literals;
  const std::string bytes = "RIFF\xff\xff\xff\xffWAVEfmt \xff\xff\xff\xff\x01\0\0\0\0\0\0\0\x01"s;
  WavStreamMeter meter;
  EXPECT_EQ(meter.feed(bytes), 0u);
  EXPECT_FALSE(meter.in_samples());
  EXPECT_EQ(meter.error(), "");  // still waiting for the chunk's 4 GiB body
}

}  // namespace
}  // namespace omni::cli::bench
