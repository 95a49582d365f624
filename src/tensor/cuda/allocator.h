// Caching allocator for device memory, so that the per-step activations of an engine reuse
// blocks instead of calling cudaMalloc/cudaFree (both synchronise the device).
//
// Blocks are handed out stream-ordered: free() returns a block to its device's cache at once,
// even while kernels queued on the device's stream still read it; the next allocate() that
// reuses it can only be used by ops queued later on the same stream, which run after those.
// Sizes are rounded (512 bytes below 1 MiB, 2 MiB above); a request reuses the smallest cached
// block of at least its rounded size and at most twice it (tensor/free_block_cache.h), so varying
// shapes do not each add blocks; when cudaMalloc fails, the cache of that device is released and
// the call retried once.
//
// CUDA graphs: while a GraphPoolScope is alive on a thread, that thread's allocations on the scope's
// device come from the device's graph pool instead, a separate cache that no other allocation ever
// uses. A graph holds on to the addresses its kernels were captured with, so the blocks it used
// must never serve eager ops; every graph of a device shares the pool because graphs replay one
// at a time on the device's one stream, so a block free after one graph's capture may serve the
// next capture. A block goes back to the cache it came from, whichever thread frees it; pool
// blocks are never returned to CUDA.
//
// Offloadable memory: a thread routed to a device's offload arena (tensor/cuda/offload_arena.h) gets
// its allocations on that device from the arena instead.
//
// Thread-safe. allocate() throws omni::Error(kUnavailable) naming the device and the size when
// the device is out of memory; every pointer is 256-byte aligned.
#pragma once

#include <cstddef>

namespace omni::tensor::cuda {

class DeviceAllocator {
 public:
  static void* allocate(size_t bytes, int device);
  static void free(void* ptr, int device) noexcept;
  // Bytes held by the cache of `device` (allocated from CUDA, not in use).
  static size_t cached_bytes(int device);
  // Returns the cached blocks of `device` to CUDA (synchronises the device first).
  static void release_cache(int device);
};

// Routes the calling thread's allocations on `device` to its graph pool until destroyed. Scopes
// do not nest.
class GraphPoolScope {
 public:
  explicit GraphPoolScope(int device);
  ~GraphPoolScope();
  GraphPoolScope(const GraphPoolScope&) = delete;
  GraphPoolScope& operator=(const GraphPoolScope&) = delete;
};

}  // namespace omni::tensor::cuda
