// Audio decoding for media a client sends (chat `input_audio`/`audio_url` parts, voice-clone
// references): any container and codec FFmpeg's libavformat and libavcodec read (WAV, FLAC, MP3,
// Ogg Vorbis/Opus, M4A/AAC, WebM…), held in memory, to mono float32 samples, and resampling with
// libsoxr to the rate a model's processor takes.
//
// Mono is the mean of the channels (what librosa's `load(mono=True)` gives, the loader the Hugging
// Face processors are fed with); integer samples are scaled by 1/32768 (1/2^31, 1/128 for 8-bit).
// Resampling uses soxr's high-quality preset and yields ceil(n * to / from) samples, the length
// librosa's soxr path keeps.
//
// Errors: omni::Error(kInvalidArgument) with a message that says what is wrong with the bytes
// ("not an audio file FFmpeg can read: Invalid data found when processing input", "the audio is
// longer than the limit of 600 s", "the audio's sample rate of 2000000 Hz is above the limit of
// 384000 Hz"); callers prefix the field or content part at fault. Decoding never reads more than
// the limits allow, so hostile input cannot exhaust memory, and it reads only the bytes given: a
// container that refers to other files or URLs (an HLS or concat playlist, a QuickTime reference)
// cannot open them. A valid file without samples decodes to none: callers that need a minimum
// length check it.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace omni::media {

struct AudioDecodeLimits {
  size_t max_bytes = size_t{64} << 20;  // of the encoded input
  double max_seconds = 600.0;           // of the decoded audio
  // Of the source (the highest rate audio gear records at): with max_seconds it bounds the memory
  // one decode takes (600 s at 384 kHz: 230M samples), whatever rate a hostile header claims.
  int max_sample_rate = 384000;
};

struct DecodedAudio {
  std::string container;  // libavformat's demuxer name ("wav", "flac", "mp3", "ogg", "aac"…)
  std::string codec;      // libavcodec's decoder name
  int sample_rate = 0;
  int channels = 0;            // of the source; `samples` is always mono
  std::vector<float> samples;  // the mean of the channels

  double seconds() const { return sample_rate > 0 ? static_cast<double>(samples.size()) / sample_rate : 0.0; }
};

DecodedAudio decode_audio(std::string_view bytes, const AudioDecodeLimits& limits = {});

// soxr HQ resampling of mono samples; returns the input unchanged when the rates are equal.
// Throws omni::Error(kInvalidArgument) for a rate that is not positive.
std::vector<float> resample_audio(std::span<const float> samples, int from_rate, int to_rate);

// decode_audio, then resample_audio to `sample_rate`.
std::vector<float> decode_audio_at(std::string_view bytes, int sample_rate, const AudioDecodeLimits& limits = {});

}  // namespace omni::media
