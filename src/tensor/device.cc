#include "tensor/device.h"

#include "base/error.h"

namespace omni::tensor {

std::string device_name(Device device) {
  if (device.type == DeviceType::kCpu) return "cpu";
  return "cuda:" + std::to_string(device.index);
}

Device parse_device(const std::string& text, const std::string& source) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const std::string index = text.substr(5);
    if (!index.empty() && index.find_first_not_of("0123456789") == std::string::npos && index.size() < 4) {
      return Device::cuda(std::stoi(index));
    }
  }
  throw_error(ErrorCode::kInvalidArgument, "{}: unknown device '{}' (allowed: cpu, cuda, cuda:N)", source, text);
}

}  // namespace omni::tensor
