#include "model/qwen3_tts/codec_frames.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace omni::model::qwen3_tts {
namespace {

TEST(CodecFramesTest, RoundTripKeepsFrameMajorCodes) {
  std::vector<int32_t> codes = {0, 2047, 1, 2, 2150, 7};
  std::vector<uint8_t> bytes = encode_codec_frames(codes, 3);
  ASSERT_EQ(bytes.size(), 24u);
  EXPECT_EQ(bytes[4], 0xff);  // 2047 little-endian
  EXPECT_EQ(bytes[5], 0x07);
  EXPECT_EQ(decode_codec_frames(bytes, 3), codes);
  EXPECT_TRUE(decode_codec_frames({}, 16).empty());
}

TEST(CodecFramesTest, PartialFramesAreRefusedNamingTheSizes) {
  std::vector<int32_t> codes = {1, 2, 3};
  EXPECT_THROW(encode_codec_frames(codes, 2), Error);
  std::vector<uint8_t> bytes(12);
  try {
    decode_codec_frames(bytes, 2);
    FAIL() << "a partial frame was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("12 bytes are not whole frames of 2 int32 codes"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace omni::model::qwen3_tts
