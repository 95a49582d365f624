// Float samples to 16-bit signed PCM, the sample format of the WAV, PCM and FLAC outputs.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>

namespace omni::media {

// Clips to [-1, 1] (NaN reads as 0) and rounds x * 32767 to the nearest integer, so that 1.0 and
// -1.0 map to +-32767 and the conversion is symmetric.
inline int16_t to_pcm16(float sample) {
  if (!(sample > -1.0f)) sample = std::isnan(sample) ? 0.0f : -1.0f;
  if (sample > 1.0f) sample = 1.0f;
  return static_cast<int16_t>(std::lrintf(sample * 32767.0f));
}

// The clipped float value an encoder feeds its codec (the same clipping as to_pcm16).
inline float clip_sample(float sample) {
  if (std::isnan(sample)) return 0.0f;
  return sample < -1.0f ? -1.0f : (sample > 1.0f ? 1.0f : sample);
}

// Appends the samples as 16-bit little-endian integers.
void append_pcm16_le(std::span<const float> samples, std::string& out);

}  // namespace omni::media
