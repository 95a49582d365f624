#include "tensor/backend.h"

#include <malloc.h>

#include "base/error.h"

#ifdef OMNI_HAVE_CUDA
#include "tensor/cuda/allocator.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/offload_arena.h"
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

Device resolve_device(const std::string& text, const std::string& source) {
  if (text.empty() || text == "auto") return cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu();
  const Device device = parse_device(text, source);
  if (device.type == DeviceType::kCuda && device.index >= cuda_device_count()) {
    throw_error(ErrorCode::kUnavailable, "{} {}: no such CUDA device ({} visible{})", source, text, cuda_device_count(),
                compiled_backends() == "cpu" ? "; this build has no CUDA backend" : "");
  }
  return device;
}

DeviceMemory cuda_memory_info(int index) {
#ifdef OMNI_HAVE_CUDA
  cuda::stream_for(index);  // selects the device, checking that it is visible
  DeviceMemory memory;
  cuda::check(cudaMemGetInfo(&memory.free_bytes, &memory.total_bytes), "cudaMemGetInfo", index);
  return memory;
#else
  throw_error(ErrorCode::kUnavailable, "cuda:{}: this build has no CUDA backend", index);
#endif
}

void release_freed_memory(const Device& device) {
#ifdef OMNI_HAVE_CUDA
  if (device.type == DeviceType::kCuda) cuda::DeviceAllocator::release_cache(device.index);
#endif
  // Freed host blocks below glibc's mmap threshold stay in its heap until trimmed.
  if (device.type == DeviceType::kCpu) malloc_trim(0);
}

OffloadableMemoryScope::OffloadableMemoryScope(const Device& device) {
#ifdef OMNI_HAVE_CUDA
  if (device.type == DeviceType::kCuda) {
    cuda::OffloadArena::route_thread_to(device.index);
    active_ = true;
  }
#else
  (void)device;
#endif
}

OffloadableMemoryScope::~OffloadableMemoryScope() {
#ifdef OMNI_HAVE_CUDA
  if (active_) cuda::OffloadArena::route_thread_to(-1);
#endif
}

size_t offload_memory(const Device& device) {
#ifdef OMNI_HAVE_CUDA
  if (device.type == DeviceType::kCuda) return cuda::OffloadArena::offload(device.index);
#endif
  (void)device;
  return 0;
}

size_t restore_memory(const Device& device) {
#ifdef OMNI_HAVE_CUDA
  if (device.type == DeviceType::kCuda) return cuda::OffloadArena::restore(device.index);
#endif
  (void)device;
  return 0;
}

}  // namespace omni::tensor
