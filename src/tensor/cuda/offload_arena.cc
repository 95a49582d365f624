#include "tensor/cuda/offload_arena.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "tensor/cuda/device.h"

namespace omni::tensor::cuda {
namespace {

constexpr size_t kAlignment = 256;
// Physical memory is mapped in chunks of at least this much, so a model's few hundred weights
// need few chunks; at most one chunk's tail is unused.
constexpr size_t kMinChunk = size_t{64} << 20;

size_t round_up(size_t value, size_t unit) { return (value + unit - 1) / unit * unit; }

// The virtual memory management calls of the driver API, found through the runtime so that the
// binary does not link libcuda (machines without a driver still run the CPU backend).
struct Driver {
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
};

template <typename F>
void find_entry_point(const char* name, F& fn) {
  void* ptr = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t status = cudaGetDriverEntryPointByVersion(name, &ptr, 12000, cudaEnableDefault, &found);
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || ptr == nullptr) {
    cudaGetLastError();
    throw_error(ErrorCode::kUnavailable, "the CUDA driver has no {} (needed to offload memory)", name);
  }
  fn = reinterpret_cast<F>(ptr);
}

const Driver& driver() {
  static const Driver loaded = [] {
    Driver d;
    find_entry_point("cuMemGetAllocationGranularity", d.granularity);
    find_entry_point("cuMemAddressReserve", d.reserve);
    find_entry_point("cuMemCreate", d.create);
    find_entry_point("cuMemRelease", d.release);
    find_entry_point("cuMemMap", d.map);
    find_entry_point("cuMemUnmap", d.unmap);
    find_entry_point("cuMemSetAccess", d.set_access);
    return d;
  }();
  return loaded;
}

void check_driver(CUresult result, const char* what, int device) {
  if (result == CUDA_SUCCESS) return;
  const ErrorCode code = result == CUDA_ERROR_OUT_OF_MEMORY ? ErrorCode::kUnavailable : ErrorCode::kInternal;
  throw_error(code, "cuda:{}: {} failed (CUresult {})", device, what, static_cast<int>(result));
}

struct Chunk {
  size_t offset = 0;  // from the arena's base
  size_t size = 0;
  CUmemGenericAllocationHandle handle = 0;  // while mapped
  void* host = nullptr;                     // while offloaded: the chunk's bytes in use
  size_t host_bytes = 0;
};

struct Arena {
  std::mutex mutex;
  CUdeviceptr base = 0;  // reserved once, never freed
  size_t reserved = 0;
  size_t granularity = 0;
  size_t used = 0;    // bump offset
  size_t mapped = 0;  // bytes of chunks from base
  std::vector<Chunk> chunks;
  std::unordered_map<void*, size_t> live;
  bool offloaded = false;
};

Arena& arena_of(int device) {
  static std::mutex mutex;
  // Never destroyed: tensors with static lifetime may free after main returns.
  static auto* arenas = new std::map<int, Arena>();
  std::lock_guard lock(mutex);
  return (*arenas)[device];
}

CUmemAllocationProp chunk_properties(int device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

// Backs [offset, offset + size) of the arena with new physical memory, readable and writable by
// `device`.
CUmemGenericAllocationHandle map_chunk(Arena& arena, size_t offset, size_t size, int device) {
  const Driver& d = driver();
  const CUmemAllocationProp prop = chunk_properties(device);
  CUmemGenericAllocationHandle handle = 0;
  check_driver(d.create(&handle, size, &prop, 0), "cuMemCreate", device);
  const CUdeviceptr at = arena.base + offset;
  if (const CUresult mapped = d.map(at, size, 0, handle, 0); mapped != CUDA_SUCCESS) {
    d.release(handle);
    check_driver(mapped, "cuMemMap", device);
  }
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (const CUresult set = d.set_access(at, size, &access, 1); set != CUDA_SUCCESS) {
    d.unmap(at, size);
    d.release(handle);
    check_driver(set, "cuMemSetAccess", device);
  }
  return handle;
}

void unmap_chunk(Arena& arena, Chunk& chunk) {
  const Driver& d = driver();
  d.unmap(arena.base + chunk.offset, chunk.size);
  d.release(chunk.handle);
  chunk.handle = 0;
}

void reserve_locked(Arena& arena, int device) {
  if (arena.base != 0) return;
  stream_for(device);
  const Driver& d = driver();
  const CUmemAllocationProp prop = chunk_properties(device);
  check_driver(d.granularity(&arena.granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
               "cuMemGetAllocationGranularity", device);
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo", device);
  // Addresses are cheap; the arena can never hold more than the device's memory.
  arena.reserved = round_up(total_bytes, arena.granularity);
  check_driver(d.reserve(&arena.base, arena.reserved, arena.granularity, 0, 0), "cuMemAddressReserve", device);
}

// Returns every chunk (device memory or host copy) once the arena holds no block.
void empty_locked(Arena& arena, int device) {
  check(cudaStreamSynchronize(stream_for(device)), "cudaStreamSynchronize", device);
  for (Chunk& chunk : arena.chunks) {
    if (chunk.handle != 0) unmap_chunk(arena, chunk);
    if (chunk.host != nullptr) cudaFreeHost(chunk.host);
  }
  arena.chunks.clear();
  arena.used = 0;
  arena.mapped = 0;
  arena.offloaded = false;
}

thread_local int arena_device = -1;

}  // namespace

void* OffloadArena::allocate(size_t bytes, int device) {
  Arena& arena = arena_of(device);
  std::lock_guard lock(arena.mutex);
  if (arena.offloaded) {
    throw_error(ErrorCode::kUnavailable, "cuda:{}: cannot allocate while the offload arena is in host memory", device);
  }
  reserve_locked(arena, device);
  const size_t size = round_up(std::max<size_t>(bytes, 1), kAlignment);
  if (arena.used + size > arena.reserved) {
    throw_error(ErrorCode::kUnavailable, "cuda:{}: cannot allocate {} bytes: the offload arena holds {} of {}", device,
                size, arena.used, arena.reserved);
  }
  if (arena.used + size > arena.mapped) {
    const size_t chunk_size =
        std::min(round_up(std::max(arena.used + size - arena.mapped, kMinChunk), arena.granularity),
                 arena.reserved - arena.mapped);
    Chunk chunk{.offset = arena.mapped, .size = chunk_size};
    chunk.handle = map_chunk(arena, chunk.offset, chunk.size, device);
    arena.chunks.push_back(chunk);
    arena.mapped += chunk_size;
  }
  void* ptr = reinterpret_cast<void*>(arena.base + arena.used);
  arena.used += size;
  arena.live[ptr] = size;
  return ptr;
}

bool OffloadArena::free(void* ptr, int device) noexcept {
  Arena& arena = arena_of(device);
  std::lock_guard lock(arena.mutex);
  if (arena.live.erase(ptr) == 0) return false;
  if (arena.live.empty()) {
    try {
      empty_locked(arena, device);
    } catch (const std::exception&) {
      // A failed synchronisation means the device is lost; the process is ending its work on it.
    }
  }
  return true;
}

size_t OffloadArena::offload(int device) {
  Arena& arena = arena_of(device);
  std::lock_guard lock(arena.mutex);
  if (arena.offloaded || arena.chunks.empty()) return 0;
  check(cudaStreamSynchronize(stream_for(device)), "cudaStreamSynchronize", device);
  for (Chunk& chunk : arena.chunks) {
    chunk.host_bytes = std::min(chunk.size, arena.used > chunk.offset ? arena.used - chunk.offset : 0);
    if (chunk.host_bytes == 0) continue;
    if (const cudaError_t status = cudaMallocHost(&chunk.host, chunk.host_bytes); status != cudaSuccess) {
      cudaGetLastError();
      for (Chunk& undo : arena.chunks) {
        if (undo.host != nullptr) cudaFreeHost(undo.host);
        undo.host = nullptr;
      }
      throw_error(ErrorCode::kUnavailable, "cuda:{}: cannot allocate {} bytes of pinned host memory: {}", device,
                  chunk.host_bytes, cudaGetErrorString(status));
    }
  }
  size_t copied = 0;
  for (Chunk& chunk : arena.chunks) {
    if (chunk.host_bytes > 0) {
      check(cudaMemcpy(chunk.host, reinterpret_cast<void*>(arena.base + chunk.offset), chunk.host_bytes,
                       cudaMemcpyDeviceToHost),
            "cudaMemcpy to the host", device);
      copied += chunk.host_bytes;
    }
  }
  for (Chunk& chunk : arena.chunks) unmap_chunk(arena, chunk);
  arena.offloaded = true;
  return copied;
}

size_t OffloadArena::restore(int device) {
  Arena& arena = arena_of(device);
  std::lock_guard lock(arena.mutex);
  if (!arena.offloaded) return 0;
  stream_for(device);
  size_t copied = 0;
  for (Chunk& chunk : arena.chunks) {
    if (chunk.handle == 0) chunk.handle = map_chunk(arena, chunk.offset, chunk.size, device);
  }
  for (Chunk& chunk : arena.chunks) {
    if (chunk.host == nullptr) continue;
    check(cudaMemcpy(reinterpret_cast<void*>(arena.base + chunk.offset), chunk.host, chunk.host_bytes,
                     cudaMemcpyHostToDevice),
          "cudaMemcpy to the device", device);
    copied += chunk.host_bytes;
    cudaFreeHost(chunk.host);
    chunk.host = nullptr;
    chunk.host_bytes = 0;
  }
  arena.offloaded = false;
  return copied;
}

size_t OffloadArena::device_bytes(int device) {
  Arena& arena = arena_of(device);
  std::lock_guard lock(arena.mutex);
  return arena.offloaded ? 0 : arena.mapped;
}

void OffloadArena::route_thread_to(int device) { arena_device = device; }

int OffloadArena::routed_device() { return arena_device; }

}  // namespace omni::tensor::cuda
