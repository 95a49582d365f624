#include "media/mp3_encoder.h"

#include <lame.h>

#include <algorithm>
#include <array>
#include <vector>

#include "base/error.h"
#include "media/pcm16.h"

namespace omni::media {

namespace {

constexpr int kBitrateKbps = 64;
// The sample rates of MPEG-1, 2 and 2.5 layer III; LAME would resample anything else.
constexpr std::array<int, 9> kMpegRates = {8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000};
// LAME's documented worst case for one call: 1.25 bytes per sample plus 7200.
size_t output_bound(size_t samples) { return samples + samples / 4 + 7200; }

class Mp3Encoder final : public AudioEncoder {
 public:
  explicit Mp3Encoder(const AudioEncoderOptions& options) {
    if (std::find(kMpegRates.begin(), kMpegRates.end(), options.sample_rate) == kMpegRates.end()) {
      std::string allowed;
      for (int rate : kMpegRates) allowed += (allowed.empty() ? "" : ", ") + std::to_string(rate);
      throw_error(ErrorCode::kInvalidArgument, "mp3 encoder: sample rate {} is not an MPEG audio rate ({})",
                  options.sample_rate, allowed);
    }
    lame_ = lame_init();
    if (!lame_) throw_error(ErrorCode::kInternal, "mp3 encoder: out of memory");
    lame_set_in_samplerate(lame_, options.sample_rate);
    lame_set_out_samplerate(lame_, options.sample_rate);
    lame_set_num_channels(lame_, 1);
    lame_set_mode(lame_, MONO);
    lame_set_brate(lame_, kBitrateKbps);
    lame_set_VBR(lame_, vbr_off);
    lame_set_bWriteVbrTag(lame_, 0);
    lame_set_quality(lame_, 5);
    if (int status = lame_init_params(lame_); status < 0) {
      lame_close(lame_);
      throw_error(ErrorCode::kInternal, "mp3 encoder: LAME rejected its parameters (code {}) at {} Hz", status,
                  options.sample_rate);
    }
  }

  ~Mp3Encoder() override { lame_close(lame_); }

  std::string encode(std::span<const float> samples) override {
    if (finished_) throw_error(ErrorCode::kInternal, "mp3 encoder: encode() after finish()");
    std::string out;
    // LAME takes an int count; large inputs go in pieces.
    constexpr size_t kPiece = size_t{1} << 20;
    for (size_t at = 0; at < samples.size(); at += kPiece) {
      size_t count = std::min(kPiece, samples.size() - at);
      clipped_.resize(count);
      for (size_t i = 0; i < count; ++i) clipped_[i] = clip_sample(samples[at + i]);
      buffer_.resize(output_bound(count));
      int written = lame_encode_buffer_ieee_float(lame_, clipped_.data(), clipped_.data(), static_cast<int>(count),
                                                  buffer_.data(), static_cast<int>(buffer_.size()));
      if (written < 0) throw_error(ErrorCode::kInternal, "mp3 encoder: LAME failed with code {}", written);
      out.append(reinterpret_cast<const char*>(buffer_.data()), static_cast<size_t>(written));
    }
    return out;
  }

  std::string finish() override {
    if (finished_) throw_error(ErrorCode::kInternal, "mp3 encoder: finish() called twice");
    finished_ = true;
    buffer_.resize(output_bound(0));
    int written = lame_encode_flush(lame_, buffer_.data(), static_cast<int>(buffer_.size()));
    if (written < 0) throw_error(ErrorCode::kInternal, "mp3 encoder: LAME flush failed with code {}", written);
    return std::string(reinterpret_cast<const char*>(buffer_.data()), static_cast<size_t>(written));
  }

 private:
  lame_t lame_ = nullptr;
  std::vector<float> clipped_;
  std::vector<unsigned char> buffer_;
  bool finished_ = false;
};

}  // namespace

std::unique_ptr<AudioEncoder> make_mp3_encoder(const AudioEncoderOptions& options) {
  return std::make_unique<Mp3Encoder>(options);
}

}  // namespace omni::media
