// WAV: a 44-byte RIFF header (PCM, 16-bit, mono) followed by the samples. Streamed, the header's
// RIFF and data sizes are 0xFFFFFFFF ("unknown length", which ffmpeg, libsndfile, browsers and
// the OpenAI clients read as "until the end of the stream") and goes out with the first bytes; as
// a file it carries the exact sizes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "media/audio_encoder.h"

namespace omni::media {

std::unique_ptr<AudioEncoder> make_wav_encoder(const AudioEncoderOptions& options);

// The header for `data_bytes` bytes of samples, with 0xFFFFFFFF sizes when `data_bytes` is
// negative (length unknown). Throws omni::Error(kInvalidArgument) when the file would exceed 4 GiB.
std::string wav_header(int sample_rate, int64_t data_bytes);

}  // namespace omni::media
