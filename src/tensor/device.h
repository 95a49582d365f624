// Where a tensor's bytes live.
#pragma once

#include <string>

namespace omni::tensor {

enum class DeviceType { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index) { return {DeviceType::kCuda, index}; }
  bool operator==(const Device&) const = default;
};

// "cpu" or "cuda:0".
std::string device_name(Device device);

// Parses "cpu" or "cuda[:N]"; anything else is omni::Error(kInvalidArgument) naming `source`
// (e.g. "--device") and the allowed values.
Device parse_device(const std::string& text, const std::string& source);

}  // namespace omni::tensor
