#include "model/model_dtype.h"

#include "base/error.h"
#include "base/log.h"

namespace omni::model {

std::optional<tensor::DType> parse_model_dtype(std::string_view value, std::string_view flag) {
  if (value == "auto") return std::nullopt;
  if (value == "bfloat16") return tensor::DType::kBF16;
  if (value == "float16" || value == "half") return tensor::DType::kF16;
  if (value == "float32" || value == "float") return tensor::DType::kF32;
  throw_error(ErrorCode::kInvalidArgument, "{}: '{}' is not a dtype (allowed: {})", flag, value, kModelDTypeChoices);
}

tensor::DType resolve_model_dtype(std::optional<tensor::DType> requested, std::string_view checkpoint_dtype,
                                  tensor::Device device, std::string_view source) {
  if (device.type == tensor::DeviceType::kCpu) {
    if (requested && *requested != tensor::DType::kF32) {
      spdlog::warn("{}: dtype {} requested, but the CPU backend computes in float32 only; using float32", source,
                   tensor::dtype_name(*requested));
    }
    return tensor::DType::kF32;
  }
  if (requested) return *requested;
  if (checkpoint_dtype == "float16") return tensor::DType::kF16;
  return tensor::DType::kBF16;
}

}  // namespace omni::model
