#include "tensor/convert.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace omni::tensor {

// In slices, so that the float32 staging stays small for large matrices.
void convert_elements(DType from, const void* src, DType to, void* dst, size_t count) {
  if (from == to) {
    std::memcpy(dst, src, count * dtype_size(to));
    return;
  }
  if (to == DType::kF32) {
    convert_to_f32(from, src, static_cast<float*>(dst), count);
    return;
  }
  constexpr size_t kSlice = size_t{1} << 20;
  const size_t in_size = dtype_size(from);
  std::vector<float> wide(std::min(count, kSlice));
  auto* out = static_cast<uint16_t*>(dst);
  for (size_t begin = 0; begin < count; begin += kSlice) {
    const size_t n = std::min(kSlice, count - begin);
    convert_to_f32(from, static_cast<const char*>(src) + begin * in_size, wide.data(), n);
    for (size_t i = 0; i < n; ++i) {
      out[begin + i] = to == DType::kBF16 ? f32_to_bf16(wide[i]) : f32_to_f16(wide[i]);
    }
  }
}

}  // namespace omni::tensor
