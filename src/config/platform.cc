#include "config/platform.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "base/error.h"
#include "config/deploy_schema.h"

namespace omni::config {

std::string detect_platform(bool cuda_device_visible) {
  const char* forced = std::getenv(std::string(kPlatformEnv).c_str());
  if (forced && *forced) {
    std::string name = forced;
    if (std::find(std::begin(kPlatformNames), std::end(kPlatformNames), name) == std::end(kPlatformNames)) {
      throw_error(ErrorCode::kInvalidArgument, "{}: unknown platform '{}' (allowed: {})", kPlatformEnv, name,
                  fmt::join(kPlatformNames, ", "));
    }
    return name;
  }
  return cuda_device_visible ? "cuda" : "cpu";
}

}  // namespace omni::config
