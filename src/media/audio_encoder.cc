#include "media/audio_encoder.h"

#include <fmt/format.h>

#include "base/error.h"
#include "media/aac_encoder.h"
#include "media/flac_encoder.h"
#include "media/mp3_encoder.h"
#include "media/opus_encoder.h"
#include "media/pcm_encoder.h"
#include "media/wav_encoder.h"

namespace omni::media {

std::string_view audio_format_name(AudioFormat format) {
  switch (format) {
    case AudioFormat::kWav:
      return "wav";
    case AudioFormat::kPcm:
      return "pcm";
    case AudioFormat::kFlac:
      return "flac";
    case AudioFormat::kMp3:
      return "mp3";
    case AudioFormat::kOpus:
      return "opus";
    case AudioFormat::kAac:
      return "aac";
  }
  return "unknown";
}

const std::vector<AudioFormat>& audio_formats() {
  static const std::vector<AudioFormat> formats = {AudioFormat::kWav, AudioFormat::kPcm,  AudioFormat::kFlac,
                                                   AudioFormat::kMp3, AudioFormat::kOpus, AudioFormat::kAac};
  return formats;
}

AudioFormat audio_format_from_name(std::string_view name) {
  std::string allowed;
  for (AudioFormat format : audio_formats()) {
    if (audio_format_name(format) == name) return format;
    allowed += (allowed.empty() ? "" : ", ") + std::string(audio_format_name(format));
  }
  throw_error(ErrorCode::kInvalidArgument, "unknown audio format '{}'; allowed: {}", name, allowed);
}

// As OpenAI's speech endpoint answers (raw PCM has no registered type; OpenAI uses audio/pcm).
std::string_view audio_content_type(AudioFormat format) {
  switch (format) {
    case AudioFormat::kWav:
      return "audio/wav";
    case AudioFormat::kPcm:
      return "audio/pcm";
    case AudioFormat::kFlac:
      return "audio/flac";
    case AudioFormat::kMp3:
      return "audio/mpeg";
    case AudioFormat::kOpus:
      return "audio/ogg";
    case AudioFormat::kAac:
      return "audio/aac";
  }
  return "application/octet-stream";
}

std::unique_ptr<AudioEncoder> make_audio_encoder(AudioFormat format, const AudioEncoderOptions& options) {
  if (options.sample_rate <= 0) {
    throw_error(ErrorCode::kInvalidArgument, "{} encoder: the sample rate must be positive, not {}",
                audio_format_name(format), options.sample_rate);
  }
  switch (format) {
    case AudioFormat::kWav:
      return make_wav_encoder(options);
    case AudioFormat::kPcm:
      return make_pcm_encoder(options);
    case AudioFormat::kFlac:
      return make_flac_encoder(options);
    case AudioFormat::kMp3:
      return make_mp3_encoder(options);
    case AudioFormat::kOpus:
      return make_opus_encoder(options);
    case AudioFormat::kAac:
      return make_aac_encoder(options);
  }
  throw_error(ErrorCode::kInternal, "no encoder for audio format {}", static_cast<int>(format));
}

}  // namespace omni::media
