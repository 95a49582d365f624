// PCM: raw 16-bit signed little-endian mono samples, no header (OpenAI's response_format "pcm").
// Streamed or not, the output is the same bytes.
#pragma once

#include <memory>

#include "media/audio_encoder.h"

namespace omni::media {

std::unique_ptr<AudioEncoder> make_pcm_encoder(const AudioEncoderOptions& options);

}  // namespace omni::media
