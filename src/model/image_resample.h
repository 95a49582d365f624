// Bicubic resampling of 8-bit images as the Hugging Face image processors' torchvision path does it
// (torchvision's resize with InterpolationMode.BICUBIC and antialias on a uint8 CPU tensor, ATen's
// PIL-style 8-bit kernel): a separable antialiased filter (the cubic kernel with a = -0.5, its
// support widened by the scale when shrinking; each output pixel's weights, computed in double,
// normalised to sum 1, then rounded to 16-bit fixed point with as many fractional bits as the
// largest weight allows), the width first into 8-bit pixels (integer sums, rounded, clamped), then
// the height the same way. The tests compare it with transformers 5.17's processor pixel for pixel.
//
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace omni::model {

// `pixels` [height, width, channels] uint8 row-major, resized to [out_height, out_width, channels].
// A dimension of the same size passes through unchanged.
std::vector<uint8_t> resize_bicubic_antialias(std::span<const uint8_t> pixels, int64_t height, int64_t width,
                                              int64_t channels, int64_t out_height, int64_t out_width);

}  // namespace omni::model
