#include <cuda_runtime.h>

#include "tensor/cuda/device.h"

namespace omni::tensor::cuda {

int visible_device_count() {
  int count = 0;
  // No driver or no device is an answer (zero), not an error: the CPU backend still serves.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace omni::tensor::cuda
