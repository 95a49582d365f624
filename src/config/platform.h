// Which platforms: section of a deploy YAML applies to this process.
#pragma once

#include <string>
#include <string_view>

namespace omni::config {

inline constexpr std::string_view kPlatformEnv = "OMNISTAGE_PLATFORM";

// The platform name: OMNISTAGE_PLATFORM when set (one of cuda, rocm, npu, xpu, musa, cpu, else
// omni::Error(kInvalidArgument) naming the variable and the allowed values), otherwise "cuda" when
// `cuda_device_visible`, else "cpu". The caller detects devices (config/ does not use tensor/).
std::string detect_platform(bool cuda_device_visible);

}  // namespace omni::config
