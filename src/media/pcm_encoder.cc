#include "media/pcm_encoder.h"

#include "base/error.h"
#include "media/pcm16.h"

namespace omni::media {

namespace {

// Nothing to hold back: every sample is final once converted, in either mode.
class PcmEncoder final : public AudioEncoder {
 public:
  std::string encode(std::span<const float> samples) override {
    if (finished_) throw_error(ErrorCode::kInternal, "pcm encoder: encode() after finish()");
    std::string out;
    append_pcm16_le(samples, out);
    return out;
  }

  std::string finish() override {
    if (finished_) throw_error(ErrorCode::kInternal, "pcm encoder: finish() called twice");
    finished_ = true;
    return {};
  }

 private:
  bool finished_ = false;
};

}  // namespace

std::unique_ptr<AudioEncoder> make_pcm_encoder(const AudioEncoderOptions&) { return std::make_unique<PcmEncoder>(); }

}  // namespace omni::media
