// TEST ONLY: decodes an audio file held in memory with FFmpeg (libavformat + libavcodec), an
// implementation independent of the encoders under test, so that tests check what a real player
// would read.
#pragma once

#include <string>
#include <vector>

namespace omni::testing {

struct DecodedAudio {
  std::string container;  // libavformat's demuxer name ("wav", "flac", "mp3", "ogg", "aac")
  std::string codec;      // libavcodec's decoder name
  int sample_rate = 0;
  int channels = 0;
  std::vector<float> samples;  // the first channel; integer formats scaled by 1/32768 (1/2^31)
};

// Throws std::runtime_error with FFmpeg's message when the bytes do not decode.
DecodedAudio decode_audio(const std::string& bytes);

}  // namespace omni::testing
