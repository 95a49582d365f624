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

// Memory that the calling thread allocates on `device` while the scope lives can be moved to host
// memory and back at the same addresses (sleep mode, level 1): offload_memory() copies it to pinned
// host memory and gives the device memory back; restore_memory() maps device memory again at the
// same addresses and copies the bytes back, so tensors — and CUDA graphs captured reading them —
// stay valid. Meant for memory allocated once and freed together, such as a model's weights (on a
// CUDA device it is a bump arena: tensor/cuda/offload_arena.h). On the host the scope does nothing
// and both calls return 0: host memory is already where offloading would put it. Scopes do not nest.
class OffloadableMemoryScope {
 public:
  explicit OffloadableMemoryScope(const Device& device);
  ~OffloadableMemoryScope();
  OffloadableMemoryScope(const OffloadableMemoryScope&) = delete;
  OffloadableMemoryScope& operator=(const OffloadableMemoryScope&) = delete;

 private:
  bool active_ = false;
};

// The bytes moved to the host (0 when nothing offloadable is on `device` or it is already moved).
// kUnavailable when pinned host memory runs out; nothing is moved then.
size_t offload_memory(const Device& device);
// The bytes moved back (0 when nothing is offloaded). kUnavailable when the device is out of memory.
size_t restore_memory(const Device& device);

}  // namespace omni::tensor
