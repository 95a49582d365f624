#include "tensor/cuda/allocator.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "tensor/cuda/device.h"

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
  std::map<size_t, std::vector<void*>> free_blocks;  // rounded size -> blocks
  std::unordered_map<void*, size_t> sizes;           // every block from cudaMalloc
  size_t cached = 0;
};

Cache& cache_of(int device) {
  static std::mutex mutex;
  // Never destroyed: tensors with static lifetime may free after main returns.
  static auto* caches = new std::map<int, Cache>();
  std::lock_guard lock(mutex);
  return (*caches)[device];
}

void release_locked(Cache& cache, int device) {
  check(cudaStreamSynchronize(stream_for(device)), "cudaStreamSynchronize", device);
  for (auto& [size, blocks] : cache.free_blocks) {
    for (void* ptr : blocks) {
      cudaFree(ptr);
      cache.sizes.erase(ptr);
    }
  }
  cache.free_blocks.clear();
  cache.cached = 0;
}

}  // namespace

void* DeviceAllocator::allocate(size_t bytes, int device) {
  const size_t size = round_size(bytes);
  Cache& cache = cache_of(device);
  std::lock_guard lock(cache.mutex);
  auto it = cache.free_blocks.find(size);
  if (it != cache.free_blocks.end() && !it->second.empty()) {
    void* ptr = it->second.back();
    it->second.pop_back();
    cache.cached -= size;
    return ptr;
  }
  stream_for(device);
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, size);
  if (status == cudaErrorMemoryAllocation) {
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
  Cache& cache = cache_of(device);
  std::lock_guard lock(cache.mutex);
  const size_t size = cache.sizes.at(ptr);
  cache.free_blocks[size].push_back(ptr);
  cache.cached += size;
}

size_t DeviceAllocator::cached_bytes(int device) {
  Cache& cache = cache_of(device);
  std::lock_guard lock(cache.mutex);
  return cache.cached;
}

void DeviceAllocator::release_cache(int device) {
  Cache& cache = cache_of(device);
  std::lock_guard lock(cache.mutex);
  release_locked(cache, device);
}

}  // namespace omni::tensor::cuda
