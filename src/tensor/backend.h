// Which compute backends this build of omnistage contains and which devices it can see.
#pragma once

#include <cstddef>
#include <string>

#include "tensor/device.h"

namespace omni::tensor {

// "cpu" or "cpu, cuda (sm_90)": the backends compiled into this binary.
std::string compiled_backends();

// Number of CUDA devices visible to this process; 0 without the CUDA backend, a driver or a GPU.
int cuda_device_count();

// The device a --device style setting names: "auto" (or empty) is cuda:0 when a GPU is visible,
// else the CPU; otherwise as parse_device. A CUDA device that is not visible is
// omni::Error(kUnavailable) naming `source` and the visible count.
Device resolve_device(const std::string& text, const std::string& source);

struct DeviceMemory {
  size_t free_bytes = 0;   // what this and every other process has not allocated yet
  size_t total_bytes = 0;  // the device's capacity
};

// The memory of CUDA device `index` now (cudaMemGetInfo). kUnavailable without the CUDA backend or
// when the device is not visible.
DeviceMemory cuda_memory_info(int index);

// Hands the memory that `device`'s tensors freed back to the system: on a CUDA device the caching
// allocator's unused blocks go back to CUDA (sleep mode, so that another process can use them);
// on the host the allocator's free heap memory is trimmed (glibc keeps freed blocks otherwise). Any
// thread.
void release_freed_memory(const Device& device);

}  // namespace omni::tensor
