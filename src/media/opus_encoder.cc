#include "media/opus_encoder.h"

#include <opusenc.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "base/error.h"
#include "media/pcm16.h"

namespace omni::media {

namespace {

constexpr int kBitrate = 32000;
constexpr int kSerialNumber = 0x6f6d6e69;  // "omni"
// In 48 kHz samples: how long a page may hold audio back (100 ms), and how much input the
// encoder waits for before encoding a frame (none beyond the frame itself).
constexpr int kMuxingDelay = 4800;
constexpr int kDecisionDelay = 0;
// libopusenc's own range for the input rate (it resamples anything in it).
constexpr int kMinRate = 100;
constexpr int kMaxRate = 768000;

class OpusEncoder final : public AudioEncoder {
 public:
  explicit OpusEncoder(const AudioEncoderOptions& options)
      : block_(static_cast<size_t>(std::max(1, options.sample_rate / 50))) {
    if (options.sample_rate < kMinRate || options.sample_rate > kMaxRate) {
      throw_error(ErrorCode::kInvalidArgument, "opus encoder: sample rate {} is outside libopusenc's range [{}, {}]",
                  options.sample_rate, kMinRate, kMaxRate);
    }
    OggOpusComments* comments = ope_comments_create();
    if (!comments) throw_error(ErrorCode::kInternal, "opus encoder: out of memory");
    OpusEncCallbacks callbacks{&OpusEncoder::write_pages, &OpusEncoder::close};
    int error = OPE_OK;
    encoder_ = ope_encoder_create_callbacks(&callbacks, this, comments, options.sample_rate, 1, 0, &error);
    ope_comments_destroy(comments);  // the encoder keeps its own copy
    if (!encoder_) throw_error(ErrorCode::kInternal, "opus encoder: {}", ope_strerror(error));
    check(ope_encoder_ctl(encoder_, OPE_SET_SERIALNO(kSerialNumber)), "setting the serial number");
    check(ope_encoder_ctl(encoder_, OPE_SET_MUXING_DELAY(kMuxingDelay)), "setting the muxing delay");
    check(ope_encoder_ctl(encoder_, OPE_SET_DECISION_DELAY(kDecisionDelay)), "setting the decision delay");
    check(ope_encoder_ctl(encoder_, OPUS_SET_BITRATE(kBitrate)), "setting the bit rate");
  }

  ~OpusEncoder() override { ope_encoder_destroy(encoder_); }

  std::string encode(std::span<const float> samples) override {
    if (finished_) throw_error(ErrorCode::kInternal, "opus encoder: encode() after finish()");
    flush_header();
    for (float sample : samples) pending_.push_back(clip_sample(sample));
    size_t at = 0;
    for (; pending_.size() - at >= block_; at += block_) write(pending_.data() + at, block_);
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(at));
    return std::exchange(output_, {});
  }

  std::string finish() override {
    if (finished_) throw_error(ErrorCode::kInternal, "opus encoder: finish() called twice");
    finished_ = true;
    flush_header();
    if (!pending_.empty()) write(pending_.data(), pending_.size());
    pending_.clear();
    // libopusenc 0.2.1 fails an assertion when draining a stream without audio; the header pages
    // alone are a valid stream of no samples.
    if (samples_written_ > 0) check(ope_encoder_drain(encoder_), "draining");
    return std::exchange(output_, {});
  }

 private:
  void check(int status, const char* what) {
    if (status != OPE_OK) throw_error(ErrorCode::kInternal, "opus encoder: {} failed: {}", what, ope_strerror(status));
  }

  void write(const float* samples, size_t count) {
    check(ope_encoder_write_float(encoder_, samples, static_cast<int>(count)), "encoding");
    samples_written_ += count;
  }

  // The two header pages, before any audio, so that a stream's first bytes identify it.
  void flush_header() {
    if (header_flushed_) return;
    header_flushed_ = true;
    check(ope_encoder_flush_header(encoder_), "writing the header");
  }

  static int write_pages(void* user, const unsigned char* data, opus_int32 length) {
    static_cast<OpusEncoder*>(user)->output_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(length));
    return 0;
  }
  static int close(void*) { return 0; }

  // libopusenc's output depends on how its input is split (its resampler and the encoder's
  // analysis see different buffers), so it always gets whole 20 ms blocks, the rest at finish().
  size_t block_;
  std::vector<float> pending_;
  size_t samples_written_ = 0;
  OggOpusEnc* encoder_ = nullptr;
  std::string output_;  // pages written and not yet returned
  bool header_flushed_ = false;
  bool finished_ = false;
};

}  // namespace

std::unique_ptr<AudioEncoder> make_opus_encoder(const AudioEncoderOptions& options) {
  return std::make_unique<OpusEncoder>(options);
}

}  // namespace omni::media
