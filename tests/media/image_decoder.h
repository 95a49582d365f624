// Decodes a PNG, JPEG or WebP file back to 8-bit RGB with FFmpeg's decoders, for tests of the image
// encoders and of the image APIs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace omni::testing {

struct DecodedImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // height * width * 3
  std::string codec;         // FFmpeg's decoder name: png, mjpeg, webp
};

// Throws std::runtime_error naming what failed.
DecodedImage decode_image(const std::string& bytes);

}  // namespace omni::testing
