#include "tensor/cuda/allocator.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <unordered_map>

#include "base/error.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/offload_arena.h"
#include "tensor/free_block_cache.h"

namespace omni::tensor::cuda {
namespace {

constexpr size_t kSmallLimit = size_t{1} << 20;
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t{2} << 20;

size_t round_size(size_t bytes) {
  if (bytes == 0) bytes = 1;
  const size_t unit = bytes < kSmallLimit ? kSmallRound : kLargeRound;
  return (bytes + unit - 1) / unit * unit;
}

struct Cache {
  std::mutex mutex;
  FreeBlockCache free_blocks;
  std::unordered_map<void*, size_t> sizes;  // every block from cudaMalloc
};

// The eager cache (pool false) or the graph pool (pool true) of a device.
Cache& cache_of(int device, bool pool = false) {
  static std::mutex mutex;
  // Never destroyed: tensors with static lifetime may free after main returns.
  static auto* caches = new std::map<std::pair<int, bool>, Cache>();
  std::lock_guard lock(mutex);
  return (*caches)[{device, pool}];
}

// The device whose allocations on this thread go to the graph pool, -1 for none.
thread_local int graph_pool_device = -1;

void release_locked(Cache& cache, int device) {
  check(cudaStreamSynchronize(stream_for(device)), "cudaStreamSynchronize", device);
  for (const FreeBlockCache::Block& block : cache.free_blocks.take_all()) {
    cudaFree(block.ptr);
    cache.sizes.erase(block.ptr);
  }
}

}  // namespace

void* DeviceAllocator::allocate(size_t bytes, int device) {
  if (OffloadArena::routed_device() == device) return OffloadArena::allocate(bytes, device);
  const size_t size = round_size(bytes);
  const bool pool = graph_pool_device == device;
  Cache& cache = cache_of(device, pool);
  std::lock_guard lock(cache.mutex);
  if (const auto block = cache.free_blocks.take(size)) return block->ptr;
  stream_for(device);
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, size);
  if (status == cudaErrorMemoryAllocation && !pool) {
    cudaGetLastError();
    release_locked(cache, device);
    status = cudaMalloc(&ptr, size);
  }
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw_error(ErrorCode::kUnavailable, "cuda:{}: cannot allocate {} bytes of device memory: {}", device, size,
                cudaGetErrorString(status));
  }
  cache.sizes[ptr] = size;
  return ptr;
}

void DeviceAllocator::free(void* ptr, int device) noexcept {
  if (ptr == nullptr) return;
  if (OffloadArena::free(ptr, device)) return;
  for (bool pool : {false, true}) {
    Cache& cache = cache_of(device, pool);
    std::lock_guard lock(cache.mutex);
    const auto it = cache.sizes.find(ptr);
    if (it == cache.sizes.end()) continue;
    cache.free_blocks.put(ptr, it->second);
    return;
  }
}

size_t DeviceAllocator::cached_bytes(int device) {
  Cache& cache = cache_of(device);
  std::lock_guard lock(cache.mutex);
  return cache.free_blocks.bytes();
}

void DeviceAllocator::release_cache(int device) {
  Cache& cache = cache_of(device);
  std::lock_guard lock(cache.mutex);
  release_locked(cache, device);
}

GraphPoolScope::GraphPoolScope(int device) { graph_pool_device = device; }

GraphPoolScope::~GraphPoolScope() { graph_pool_device = -1; }

}  // namespace omni::tensor::cuda
