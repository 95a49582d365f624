// Element types of tensors and the conversions between the 16-bit floating formats and float32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace omni::tensor {

enum class DType { kF32, kBF16, kF16, kI32, kI64 };

size_t dtype_size(DType dtype);
// "float32", "bfloat16", "float16", "int32", "int64".
std::string_view dtype_name(DType dtype);

// bfloat16 is the upper half of a float32: widening is exact.
inline float bf16_to_f32(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, sizeof out);
  return out;
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// IEEE 754 binary16 to float32, subnormals, infinities and NaN included.
float f16_to_f32(uint16_t bits);

// float32 to IEEE 754 binary16, round to nearest even; overflow gives infinity, NaN stays NaN.
uint16_t f32_to_f16(float value);

// Converts `count` elements of `src` (float32, bfloat16 or float16) to float32.
void convert_to_f32(DType src_dtype, const void* src, float* dst, size_t count);

}  // namespace omni::tensor
