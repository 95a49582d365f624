// Opus in Ogg (libopusenc): mono, 32 kbit/s. Opus runs at 48 kHz: libopusenc resamples the input
// (its speex resampler) and records the input rate in the OpusHead header, as opusenc does. The
// input goes to libopusenc in 20 ms blocks (the rest at finish()). Header pages go out at once;
// audio pages at most every 100 ms of audio, so a stream starts playing early. The Ogg serial number is fixed, which
// makes the output a function of the samples alone.
#pragma once

#include <memory>

#include "media/audio_encoder.h"

namespace omni::media {

std::unique_ptr<AudioEncoder> make_opus_encoder(const AudioEncoderOptions& options);

}  // namespace omni::media
