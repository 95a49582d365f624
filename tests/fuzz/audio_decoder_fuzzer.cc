// libFuzzer target for the decoder of the audio clients send (media/audio_decoder: FFmpeg's
// demuxers and decoders, then soxr): the input is an audio file's bytes, decoded with small limits
// (1 MiB, 20 s) and resampled to 16 kHz as the speaker embedder and the chat media do.
//
// What must hold: bytes FFmpeg cannot read, or audio over the limits, are an omni::Error; decoded
// audio has a sample rate within the limit and at least one channel whenever it has samples, no
// more seconds than the limit, and resamples to ceil(n * 16000 / rate) samples.
extern "C" {
#include <libavutil/log.h>
}

#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "fuzz_guard.h"
#include "media/audio_decoder.h"

namespace {

constexpr const char* kTarget = "audio_decoder_fuzzer";

void run(std::string_view bytes) {
  omni::media::AudioDecodeLimits limits;
  limits.max_bytes = size_t{1} << 20;
  limits.max_seconds = 20.0;
  const omni::media::DecodedAudio audio = omni::media::decode_audio(bytes, limits);
  if (audio.samples.empty()) return;
  omni::fuzz::require(audio.sample_rate > 0 && audio.sample_rate <= limits.max_sample_rate && audio.channels > 0,
                      kTarget, "decoded samples without a sample rate in the limit or a channel");
  omni::fuzz::require(audio.seconds() <= limits.max_seconds, kTarget, "more seconds decoded than the limit");
  const std::vector<float> resampled = omni::media::resample_audio(audio.samples, audio.sample_rate, 16000);
  const auto expected = static_cast<size_t>(
      std::ceil(static_cast<double>(audio.samples.size()) * 16000.0 / static_cast<double>(audio.sample_rate)));
  omni::fuzz::require(
      audio.sample_rate == 16000 ? resampled.size() == audio.samples.size() : resampled.size() == expected, kTarget,
      "the resampled audio is not ceil(n * to / from) samples");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  av_log_set_level(AV_LOG_QUIET);  // FFmpeg's complaints about each malformed input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  omni::fuzz::expect_only_omni_errors(kTarget,
                                      [&] { run(std::string_view(reinterpret_cast<const char*>(data), size)); });
  return 0;
}
