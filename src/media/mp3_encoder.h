// MP3 (LAME): MPEG layer III, mono, 64 kbit/s constant bit rate, at the input's sample rate (one
// of MPEG's: 8000 to 48000 Hz). Frames go out as LAME completes them. There is no Xing/LAME tag:
// writing one means going back to the first frame, which a stream cannot, and leaving it out keeps
// a stream and a file byte-identical (decoders then keep LAME's encoder delay and padding).
#pragma once

#include <memory>

#include "media/audio_encoder.h"

namespace omni::media {

std::unique_ptr<AudioEncoder> make_mp3_encoder(const AudioEncoderOptions& options);

}  // namespace omni::media
