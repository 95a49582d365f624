#include "tensor/uniform_fill.h"

#include "base/error.h"
#include "tensor/convert.h"

#ifdef OMNI_HAVE_CUDA
#include "tensor/cuda/uniform_fill.h"
#endif

namespace omni::tensor {

void fill_uniform(Tensor& dst, size_t dst_offset, size_t count, uint64_t seed, uint64_t first_index, float lo,
                  float hi) {
  const DType dtype = dst.dtype();
  if (!dst.defined() || !dst.is_contiguous() ||
      (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16)) {
    throw_error(ErrorCode::kInvalidArgument, "fill_uniform: the destination must be a contiguous floating tensor");
  }
  if (dst_offset + count > static_cast<size_t>(dst.numel())) {
    throw_error(ErrorCode::kInvalidArgument, "fill_uniform: elements [{}, {}) are past the end of {} {}", dst_offset,
                dst_offset + count, dtype_name(dtype), shape_to_string(dst.shape()));
  }
  if (count == 0) return;
  void* at = static_cast<char*>(dst.raw()) + dst_offset * dtype_size(dtype);
  if (dst.device().type == DeviceType::kCpu) {
    if (dtype == DType::kF32) {
      auto* out = static_cast<float*>(at);
      for (size_t i = 0; i < count; ++i) out[i] = uniform_value(seed, first_index + i, lo, hi);
      return;
    }
    auto* out = static_cast<uint16_t*>(at);
    for (size_t i = 0; i < count; ++i) {
      const float v = uniform_value(seed, first_index + i, lo, hi);
      out[i] = dtype == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
    }
    return;
  }
#ifdef OMNI_HAVE_CUDA
  cuda::fill_uniform(at, dtype, count, seed, first_index, lo, hi, dst.device().index);
#else
  throw_error(ErrorCode::kUnsupported, "fill_uniform on {}: this build has no CUDA backend", device_name(dst.device()));
#endif
}

}  // namespace omni::tensor
