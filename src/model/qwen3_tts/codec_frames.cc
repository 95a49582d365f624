#include "model/qwen3_tts/codec_frames.h"

#include <bit>
#include <cstring>

#include "base/error.h"

namespace omni::model::qwen3_tts {

static_assert(std::endian::native == std::endian::little, "codec frame payloads are little-endian int32");

std::vector<uint8_t> encode_codec_frames(std::span<const int32_t> codes, int num_code_groups) {
  if (num_code_groups < 1 || codes.size() % static_cast<size_t>(num_code_groups) != 0) {
    throw_error(ErrorCode::kInvalidArgument, "codec frames: {} codes are not whole frames of {} code groups",
                codes.size(), num_code_groups);
  }
  std::vector<uint8_t> bytes(codes.size_bytes());
  if (!bytes.empty()) std::memcpy(bytes.data(), codes.data(), bytes.size());
  return bytes;
}

std::vector<int32_t> decode_codec_frames(std::span<const uint8_t> bytes, int num_code_groups) {
  const size_t frame_bytes = static_cast<size_t>(num_code_groups) * sizeof(int32_t);
  if (num_code_groups < 1 || bytes.size() % frame_bytes != 0) {
    throw_error(ErrorCode::kInvalidArgument,
                "codec frames payload: {} bytes are not whole frames of {} int32 codes ({} bytes each)", bytes.size(),
                num_code_groups, frame_bytes);
  }
  std::vector<int32_t> codes(bytes.size() / sizeof(int32_t));
  if (!codes.empty()) std::memcpy(codes.data(), bytes.data(), bytes.size());
  return codes;
}

}  // namespace omni::model::qwen3_tts
