// vLLM's --dtype: the floating type of a model's weights, activations and KV cache.
#pragma once

#include <optional>
#include <string_view>

#include "tensor/device.h"
#include "tensor/dtype.h"

namespace omni::model {

// The values --dtype accepts (vLLM's, aliases included), for help texts and errors.
inline constexpr std::string_view kModelDTypeChoices = "auto, bfloat16, float16 (half), float32 (float)";

// Parses a --dtype value: "auto" gives nullopt (the checkpoint decides, see resolve_model_dtype);
// "bfloat16"; "float16" or "half"; "float32" or "float". Anything else throws
// omni::Error(kInvalidArgument) naming `flag`, the value and kModelDTypeChoices.
std::optional<tensor::DType> parse_model_dtype(std::string_view value, std::string_view flag);

// The dtype a model runs in on `device`. On CUDA: `requested`, or with auto (nullopt) the
// checkpoint's torch dtype (`checkpoint_dtype`, config.json's dtype / torch_dtype), except that a
// float32 or unnamed one becomes bfloat16, as vLLM's auto does. On the CPU: float32, the CPU
// backend's only floating dtype; a requested 16-bit dtype is logged as a warning and float32 is used
// (the results are the more precise ones). `source` names the checkpoint in the warning.
tensor::DType resolve_model_dtype(std::optional<tensor::DType> requested, std::string_view checkpoint_dtype,
                                  tensor::Device device, std::string_view source);

}  // namespace omni::model
