// Still-image encoders for generated images: PNG (lossless), JPEG and WebP (lossy), all through
// FFmpeg's libavcodec (its png and mjpeg encoders and its libwebp wrapper), so no other library is
// needed. Stateless; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace omni::media {

enum class ImageFormat { kPng, kJpeg, kWebp };

// "png", "jpeg" (also "jpg"), "webp"; nullopt otherwise.
std::optional<ImageFormat> parse_image_format(std::string_view name);
std::string_view image_format_name(ImageFormat format);
// "image/png", "image/jpeg", "image/webp".
std::string_view image_mime_type(ImageFormat format);

// Encodes 8-bit RGB pixels (rows top to bottom, width * height * 3 bytes, interleaved) as a file of
// `format`. JPEG is 4:2:0 at quality ~90 (BT.601 full-range YUV), WebP lossy at quality 90. Throws
// omni::Error(kInvalidArgument) for a size that does not match the pixels or an odd/empty size the
// format cannot take, kInternal when FFmpeg fails (naming the encoder and its message).
std::string encode_image(std::span<const uint8_t> rgb, int width, int height, ImageFormat format);

}  // namespace omni::media
