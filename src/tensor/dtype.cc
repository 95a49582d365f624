#include "tensor/dtype.h"

#include "base/error.h"
#include "tensor/cpu/thread_pool.h"

namespace omni::tensor {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kI64:
      return 8;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float32";
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    case DType::kI32:
      return "int32";
    case DType::kI64:
      return "int64";
  }
  return "?";
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Subnormal half: normalise the mantissa into a float32 exponent.
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3ffu;
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | (mantissa << 13);
  }
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

uint16_t f32_to_f16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (abs < 0x38800000u) {
    // Subnormal (or zero) half: shift the full mantissa down and round to nearest even.
    if (abs < 0x33000000u) return sign;
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

namespace {

// The 16-bit value at `p`, which a file's layout may leave at an odd address (safetensors offsets
// are not required to be aligned): read through memcpy, which compiles to one unaligned load.
uint16_t load_u16(const unsigned char* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

void convert_range(DType src_dtype, const void* src, float* dst, size_t count) {
  const auto* in = static_cast<const unsigned char*>(src);
  switch (src_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case DType::kBF16:
      for (size_t i = 0; i < count; ++i) dst[i] = bf16_to_f32(load_u16(in + 2 * i));
      return;
    case DType::kF16:
      for (size_t i = 0; i < count; ++i) dst[i] = f16_to_f32(load_u16(in + 2 * i));
      return;
    default:
      throw_error(ErrorCode::kUnsupported, "cannot convert {} to float32", dtype_name(src_dtype));
  }
}

}  // namespace

void convert_to_f32(DType src_dtype, const void* src, float* dst, size_t count) {
  // Checkpoint loading converts gigabytes: spread it over the cores.
  const size_t width = dtype_size(src_dtype);
  cpu::parallel_for(static_cast<int64_t>(count), 1 << 16, [&](int64_t begin, int64_t end) {
    convert_range(src_dtype, static_cast<const char*>(src) + begin * width, dst + begin,
                  static_cast<size_t>(end - begin));
  });
}

}  // namespace omni::tensor
