// Small test videos made in memory with FFmpeg's libraries, for tests of the video decoder and of
// video chat parts.
#pragma once

#include <string>

namespace omni::testing {

// `frames` flat grey frames (frame i has luma 20 + 7 i, neutral chroma) of width x height at `fps`
// frames per second, MPEG-4 Part 2 in Matroska. Throws std::runtime_error when FFmpeg fails.
std::string flat_video(int frames, int fps, int width, int height);

// flat_video's frames with an audio track: `seconds` of a 440 Hz tone, mono 16-bit PCM at
// `sample_rate`, in the same Matroska file. Throws std::runtime_error when FFmpeg fails.
std::string flat_video_with_tone(int frames, int fps, int width, int height, double seconds, int sample_rate);

}  // namespace omni::testing
