// The payload the Qwen3-TTS talker stage hands to the code2wav stage: whole codec frames, each
// `num_code_groups` codes (codebook 0 from the talker, 1..15 from the code predictor), frame-major,
// as little-endian int32. One payload carries one or more frames; the stream of payloads of a
// request, in chunk order, is the request's frame sequence.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace omni::model::qwen3_tts {

// Frames in, bytes out. Throws omni::Error(kInvalidArgument) when codes.size() is not a
// multiple of num_code_groups or num_code_groups < 1.
std::vector<uint8_t> encode_codec_frames(std::span<const int32_t> codes, int num_code_groups);

// Bytes in, codes out (frame-major). Throws omni::Error(kInvalidArgument) naming the sizes
// when the bytes are not whole frames of num_code_groups int32 codes.
std::vector<int32_t> decode_codec_frames(std::span<const uint8_t> bytes, int num_code_groups);

}  // namespace omni::model::qwen3_tts
