#include "media/flac_encoder.h"

#include <FLAC/stream_encoder.h>

#include <cstring>
#include <vector>

#include "base/error.h"
#include "media/pcm16.h"

namespace omni::media {

namespace {

// FLAC's own limit for a sample rate in STREAMINFO (20 bits).
constexpr int kMaxFlacSampleRate = 1048575;

class FlacEncoder final : public AudioEncoder {
 public:
  explicit FlacEncoder(const AudioEncoderOptions& options) : streaming_(options.streaming) {
    if (options.sample_rate > kMaxFlacSampleRate) {
      throw_error(ErrorCode::kInvalidArgument, "flac encoder: sample rate {} is above FLAC's limit of {}",
                  options.sample_rate, kMaxFlacSampleRate);
    }
    encoder_ = FLAC__stream_encoder_new();
    if (!encoder_) throw_error(ErrorCode::kInternal, "flac encoder: out of memory");
    bool ok = FLAC__stream_encoder_set_channels(encoder_, 1) &&
              FLAC__stream_encoder_set_bits_per_sample(encoder_, 16) &&
              FLAC__stream_encoder_set_sample_rate(encoder_, static_cast<unsigned>(options.sample_rate)) &&
              FLAC__stream_encoder_set_compression_level(encoder_, 5) &&
              FLAC__stream_encoder_set_streamable_subset(encoder_, true);
    // Without seek and tell callbacks libFLAC leaves STREAMINFO as first written.
    FLAC__StreamEncoderInitStatus status =
        ok ? FLAC__stream_encoder_init_stream(encoder_, &FlacEncoder::write, streaming_ ? nullptr : &FlacEncoder::seek,
                                              streaming_ ? nullptr : &FlacEncoder::tell, nullptr, this)
           : FLAC__STREAM_ENCODER_INIT_STATUS_ENCODER_ERROR;
    if (status != FLAC__STREAM_ENCODER_INIT_STATUS_OK) {
      FLAC__stream_encoder_delete(encoder_);
      throw_error(ErrorCode::kInternal, "flac encoder: initialisation failed ({}) at sample rate {}",
                  FLAC__StreamEncoderInitStatusString[status], options.sample_rate);
    }
  }

  // Deleting an unfinished encoder flushes it into output_, which is still alive here.
  ~FlacEncoder() override { FLAC__stream_encoder_delete(encoder_); }

  std::string encode(std::span<const float> samples) override {
    if (finished_) throw_error(ErrorCode::kInternal, "flac encoder: encode() after finish()");
    samples_.resize(samples.size());
    for (size_t i = 0; i < samples.size(); ++i) samples_[i] = to_pcm16(samples[i]);
    if (!samples.empty() &&
        !FLAC__stream_encoder_process_interleaved(encoder_, samples_.data(), static_cast<unsigned>(samples.size()))) {
      fail("encoding");
    }
    return take();
  }

  std::string finish() override {
    if (finished_) throw_error(ErrorCode::kInternal, "flac encoder: finish() called twice");
    finished_ = true;
    if (!FLAC__stream_encoder_finish(encoder_)) fail("finishing");
    return streaming_ ? take() : std::move(output_);
  }

 private:
  [[noreturn]] void fail(const char* what) {
    throw_error(ErrorCode::kInternal, "flac encoder: {} failed: {}", what,
                FLAC__stream_encoder_get_resolved_state_string(encoder_));
  }

  // What is final: everything written so far when streaming (libFLAC will not go back); nothing
  // before finish() as a file, since STREAMINFO at the start is rewritten then.
  std::string take() {
    if (!streaming_) return {};
    std::string out = std::move(output_);
    output_.clear();
    position_ = 0;
    return out;
  }

  static FLAC__StreamEncoderWriteStatus write(const FLAC__StreamEncoder*, const FLAC__byte buffer[], size_t bytes,
                                              uint32_t, uint32_t, void* client) {
    auto* self = static_cast<FlacEncoder*>(client);
    std::string& out = self->output_;
    if (self->position_ + bytes > out.size()) out.resize(self->position_ + bytes);
    std::memcpy(out.data() + self->position_, buffer, bytes);
    self->position_ += bytes;
    return FLAC__STREAM_ENCODER_WRITE_STATUS_OK;
  }

  static FLAC__StreamEncoderSeekStatus seek(const FLAC__StreamEncoder*, FLAC__uint64 offset, void* client) {
    auto* self = static_cast<FlacEncoder*>(client);
    if (offset > self->output_.size()) return FLAC__STREAM_ENCODER_SEEK_STATUS_ERROR;
    self->position_ = offset;
    return FLAC__STREAM_ENCODER_SEEK_STATUS_OK;
  }

  static FLAC__StreamEncoderTellStatus tell(const FLAC__StreamEncoder*, FLAC__uint64* offset, void* client) {
    *offset = static_cast<FlacEncoder*>(client)->position_;
    return FLAC__STREAM_ENCODER_TELL_STATUS_OK;
  }

  bool streaming_;
  FLAC__StreamEncoder* encoder_ = nullptr;
  std::vector<FLAC__int32> samples_;
  std::string output_;   // streaming: bytes not yet returned; file: the whole file so far
  size_t position_ = 0;  // where libFLAC writes next, within output_
  bool finished_ = false;
};

}  // namespace

std::unique_ptr<AudioEncoder> make_flac_encoder(const AudioEncoderOptions& options) {
  return std::make_unique<FlacEncoder>(options);
}

}  // namespace omni::media
