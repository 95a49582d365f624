// Device memory that can leave the GPU and come back at the same addresses (sleep mode, level 1).
//
// While a thread is routed to a device's arena (tensor::OffloadableMemoryScope does it), its allocations on that device
// come from the device's offload arena instead of the caching allocator: a range of virtual
// addresses reserved once, backed by physical chunks mapped as the arena grows (CUDA's virtual
// memory management, reached through the runtime's driver entry points so that binaries still start
// on machines without a driver). offload() copies the bytes in use to pinned host memory and gives
// the physical memory back to CUDA; restore() maps new physical memory at the same addresses and
// copies the bytes back. Pointers into the arena — the tensors of a model's weights, and the CUDA
// graphs that were captured reading them — therefore stay valid across a sleep.
//
// The arena is a bump allocator: freed blocks are not reused, and the arena is emptied (its memory
// returned to CUDA or its host copy freed) when its last block is freed. It suits memory allocated
// once and freed together, such as the weights of a model. Allocating while the arena is offloaded
// is omni::Error(kUnavailable); so is exhausting the device's memory. Thread-safe.
#pragma once

#include <cstddef>

namespace omni::tensor::cuda {

class OffloadArena {
 public:
  // A block of at least `bytes` (256-byte aligned) from the arena of `device`.
  static void* allocate(size_t bytes, int device);
  // Whether `ptr` came from the arena of `device`; if so the block is released.
  static bool free(void* ptr, int device) noexcept;
  // Copies the arena's bytes in use to pinned host memory and returns its device memory to CUDA,
  // after the device's stream has finished; returns the bytes copied (0 when empty or already
  // offloaded).
  static size_t offload(int device);
  // Maps device memory at the arena's addresses again and copies the bytes back; returns the bytes
  // copied (0 when not offloaded).
  static size_t restore(int device);
  // Bytes of device memory the arena holds now (mapped chunks; 0 while offloaded).
  static size_t device_bytes(int device);

  // Sends the calling thread's allocations on `device` to its arena from now on (-1: to none).
  static void route_thread_to(int device);
  // The device whose allocations on this thread go to its arena, -1 for none.
  static int routed_device();
};

}  // namespace omni::tensor::cuda
