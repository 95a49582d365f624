#include "media/wav_encoder.h"

#include <cstdint>

#include "base/error.h"
#include "media/pcm16.h"

namespace omni::media {

namespace {

constexpr uint32_t kUnknownSize = 0xFFFFFFFF;
constexpr size_t kHeaderBytes = 44;

void put_u32(std::string& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}
void put_u16(std::string& out, uint16_t value) {
  out.push_back(static_cast<char>(value & 0xff));
  out.push_back(static_cast<char>(value >> 8));
}

class WavEncoder final : public AudioEncoder {
 public:
  explicit WavEncoder(const AudioEncoderOptions& options) : options_(options) {}

  std::string encode(std::span<const float> samples) override {
    if (finished_) throw_error(ErrorCode::kInternal, "wav encoder: encode() after finish()");
    if (!options_.streaming) {
      append_pcm16_le(samples, data_);
      return {};
    }
    std::string out;
    if (!header_sent_) {
      out = wav_header(options_.sample_rate, -1);
      header_sent_ = true;
    }
    append_pcm16_le(samples, out);
    return out;
  }

  std::string finish() override {
    if (finished_) throw_error(ErrorCode::kInternal, "wav encoder: finish() called twice");
    finished_ = true;
    if (options_.streaming) return header_sent_ ? std::string() : wav_header(options_.sample_rate, -1);
    return wav_header(options_.sample_rate, static_cast<int64_t>(data_.size())) + data_;
  }

 private:
  AudioEncoderOptions options_;
  std::string data_;  // file mode: the samples so far
  bool header_sent_ = false;
  bool finished_ = false;
};

}  // namespace

std::string wav_header(int sample_rate, int64_t data_bytes) {
  uint32_t data_size = kUnknownSize;
  uint32_t riff_size = kUnknownSize;
  if (data_bytes >= 0) {
    if (static_cast<uint64_t>(data_bytes) + kHeaderBytes - 8 >= kUnknownSize) {
      throw_error(ErrorCode::kInvalidArgument, "wav encoder: {} bytes of samples exceed the 4 GiB limit of WAV",
                  data_bytes);
    }
    data_size = static_cast<uint32_t>(data_bytes);
    riff_size = static_cast<uint32_t>(data_bytes + kHeaderBytes - 8);
  }
  constexpr uint16_t kChannels = 1;
  constexpr uint16_t kBytesPerSample = 2;
  std::string header;
  header.reserve(kHeaderBytes);
  header += "RIFF";
  put_u32(header, riff_size);
  header += "WAVEfmt ";
  put_u32(header, 16);  // the size of the PCM fmt chunk
  put_u16(header, 1);   // WAVE_FORMAT_PCM
  put_u16(header, kChannels);
  put_u32(header, static_cast<uint32_t>(sample_rate));
  put_u32(header, static_cast<uint32_t>(sample_rate) * kChannels * kBytesPerSample);
  put_u16(header, kChannels * kBytesPerSample);
  put_u16(header, 8 * kBytesPerSample);
  header += "data";
  put_u32(header, data_size);
  return header;
}

std::unique_ptr<AudioEncoder> make_wav_encoder(const AudioEncoderOptions& options) {
  return std::make_unique<WavEncoder>(options);
}

}  // namespace omni::media
