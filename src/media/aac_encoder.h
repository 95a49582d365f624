// AAC (FFmpeg's native encoder in libavcodec): AAC-LC, mono, 64 kbit/s, each 1024-sample frame
// in its own ADTS frame, the self-describing stream format that OpenAI's "aac" responses use and
// that plays from any point. Frames go out as the encoder completes them (it looks one frame
// ahead); the last partial frame is encoded at finish().
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "media/audio_encoder.h"

namespace omni::media {

std::unique_ptr<AudioEncoder> make_aac_encoder(const AudioEncoderOptions& options);

// The 7-byte ADTS header (MPEG-4, no CRC, AAC-LC, mono) of a frame of `payload_bytes` bytes.
// Throws omni::Error(kInvalidArgument) for a sample rate ADTS cannot name or a frame too large.
std::string adts_header(int sample_rate, size_t payload_bytes);

}  // namespace omni::media
