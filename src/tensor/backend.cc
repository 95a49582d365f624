#include "tensor/backend.h"

#ifdef OMNI_HAVE_CUDA
#include "tensor/cuda/device.h"
#endif

namespace omni::tensor {

std::string compiled_backends() {
#ifdef OMNI_HAVE_CUDA
  return std::string("cpu, cuda (") + OMNI_CUDA_ARCH_NAME + ")";
#else
  return "cpu";
#endif
}

int cuda_device_count() {
#ifdef OMNI_HAVE_CUDA
  return cuda::visible_device_count();
#else
  return 0;
#endif
}

}  // namespace omni::tensor
