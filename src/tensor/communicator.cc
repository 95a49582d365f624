#include "tensor/communicator.h"

#include "base/error.h"
#ifdef OMNI_HAVE_CUDA
#include "tensor/cuda/nccl_communicator.h"
#endif

namespace omni::tensor {

std::unique_ptr<Communicator> make_device_communicator(std::unique_ptr<Communicator> host, Device device) {
  if (device.type == DeviceType::kCpu) return host;
#ifdef OMNI_HAVE_CUDA
  return std::make_unique<cuda::NcclCommunicator>(std::move(host), device.index);
#else
  throw_error(ErrorCode::kUnsupported, "tensor parallelism on {}: this build has no CUDA backend", device_name(device));
#endif
}

}  // namespace omni::tensor
