// FLAC (libFLAC): 16-bit mono, compression level 5, the Subset so every decoder can play it.
// Frames go out as libFLAC completes them (one per 4096-sample block). As a file, libFLAC rewrites
// STREAMINFO at the end with the total sample count and the MD5 of the samples; a stream cannot
// go back, so its STREAMINFO says "total unknown" and has no MD5. The frames are the same.
#pragma once

#include <memory>

#include "media/audio_encoder.h"

namespace omni::media {

std::unique_ptr<AudioEncoder> make_flac_encoder(const AudioEncoderOptions& options);

}  // namespace omni::media
