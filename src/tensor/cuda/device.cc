#include "tensor/cuda/device.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>

#include "base/error.h"

namespace omni::tensor::cuda {
namespace {

constexpr int kMaxDevices = 64;

struct DeviceState {
  std::once_flag once;
  cudaStream_t stream = nullptr;
  int multiprocessors = 0;
  DeviceErrorRecord* errors = nullptr;         // host-mapped pinned memory, as the host sees it
  DeviceErrorRecord* mapped_errors = nullptr;  // the same memory, as kernels see it
};

std::array<DeviceState, kMaxDevices>& states() {
  // Never destroyed: streams must outlive every static tensor, and the runtime tears itself down
  // at exit anyway.
  static auto* all = new std::array<DeviceState, kMaxDevices>();
  return *all;
}

}  // namespace

int visible_device_count() {
  int count = 0;
  // No driver or no device is an answer (zero), not an error: the CPU backend still serves.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

void check(cudaError_t status, const char* what, int device) {
  if (status == cudaSuccess) return;
  cudaGetLastError();
  throw_error(ErrorCode::kInternal, "{} on cuda:{}: {}", what, device, cudaGetErrorString(status));
}

cudaStream_t stream_for(int index) {
  thread_local int current = -1;
  // Asked once: every op calls this, and the set of visible devices is fixed for the process.
  static const int kVisible = visible_device_count();
  if (index < 0 || index >= kMaxDevices || index >= kVisible) {
    throw_error(ErrorCode::kUnavailable, "cuda:{} is not a visible device ({} visible)", index, kVisible);
  }
  DeviceState& state = states()[index];
  if (current != index) {
    check(cudaSetDevice(index), "cudaSetDevice", index);
    current = index;
  }
  std::call_once(state.once, [&] {
    check(cudaStreamCreateWithFlags(&state.stream, cudaStreamNonBlocking), "cudaStreamCreate", index);
    check(cudaDeviceGetAttribute(&state.multiprocessors, cudaDevAttrMultiProcessorCount, index),
          "cudaDeviceGetAttribute", index);
    void* record = nullptr;
    check(cudaHostAlloc(&record, sizeof(DeviceErrorRecord), cudaHostAllocMapped | cudaHostAllocPortable),
          "cudaHostAlloc (device error record)", index);
    std::memset(record, 0, sizeof(DeviceErrorRecord));
    void* mapped = nullptr;
    check(cudaHostGetDevicePointer(&mapped, record, 0), "cudaHostGetDevicePointer (device error record)", index);
    // With unified addressing the mapped pointer is the host pointer; the host reads `record`.
    state.errors = static_cast<DeviceErrorRecord*>(record);
    state.mapped_errors = static_cast<DeviceErrorRecord*>(mapped);
  });
  return state.stream;
}

int multiprocessor_count(int index) {
  stream_for(index);
  return states()[index].multiprocessors;
}

void fail_dtype(DType dtype) {
  throw_error(ErrorCode::kInternal, "a cuda kernel was called with {} tensors", dtype_name(dtype));
}

void synchronize(int index) {
  check(cudaStreamSynchronize(stream_for(index)), "cudaStreamSynchronize", index);
  raise_device_error(index);
}

DeviceErrorRecord* device_error_record(int index) {
  stream_for(index);
  return states()[index].mapped_errors;
}

void raise_device_error(int index) {
  stream_for(index);
  volatile DeviceErrorRecord* record = states()[index].errors;
  const auto kind = static_cast<DeviceErrorKind>(record->kind);
  if (kind == DeviceErrorKind::kNone) return;
  const int64_t at = record->index, value = record->value, limit = record->limit;
  record->kind = static_cast<int32_t>(DeviceErrorKind::kNone);
  // The wording matches the dispatchers' own checks of host-side ids (tensor/ops.cc).
  if (kind == DeviceErrorKind::kTokenId) {
    throw_error(ErrorCode::kInvalidArgument,
                "embedding: token id {} at index {} is outside the vocabulary [0, {}) (found by the kernel on cuda:{})",
                value, at, limit, index);
  }
  if (kind == DeviceErrorKind::kKvBlock) {
    throw_error(ErrorCode::kInvalidArgument,
                "paged_decode_attention: row {} names KV block {}, outside the cache ({} blocks) (found by the kernel "
                "on cuda:{})",
                at, value, limit, index);
  }
  if (kind == DeviceErrorKind::kDecodeContext) {
    throw_error(ErrorCode::kInvalidArgument,
                "paged_decode_attention: row {} has context length {}, more than its block table holds ({} tokens) "
                "(found by the kernel on cuda:{})",
                at, value, limit, index);
  }
  throw_error(ErrorCode::kInvalidArgument,
              "{}: slot {} of token {} is outside the cache ({} slots) (found by the kernel on cuda:{})",
              kind == DeviceErrorKind::kFusedKvSlot ? "qkv_norm_rope_store" : "store_kv", value, at, limit, index);
}

}  // namespace omni::tensor::cuda

namespace omni::tensor::cuda {

void copy_bytes(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, int index) {
  if (bytes == 0) return;
  cudaStream_t stream = stream_for(index);
  check(cudaMemcpyAsync(dst, src, bytes, kind, stream), "cudaMemcpyAsync", index);
  // Pageable host memory: the source may be reused as soon as we return, and the caller reads
  // a host destination right away.
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize after a copy", index);
  raise_device_error(index);
}

namespace {

// A pinned staging slot is reused only after the copy that last read it has run; with
// kStagingSlots slots in rotation that wait is almost always already over.
constexpr int kStagingSlots = 16;

struct StagingSlot {
  void* host = nullptr;
  size_t capacity = 0;
  cudaEvent_t copied = nullptr;
};

struct StagingRing {
  std::mutex mutex;
  std::array<StagingSlot, kStagingSlots> slots;
  int next = 0;
};

StagingRing& staging_for(int index) {
  static auto* rings = new std::array<StagingRing, kMaxDevices>();
  return (*rings)[index];
}

}  // namespace

void upload_async(void* dst, const void* src, size_t bytes, int index) {
  if (bytes == 0) return;
  cudaStream_t stream = stream_for(index);
  StagingRing& ring = staging_for(index);
  std::lock_guard lock(ring.mutex);
  StagingSlot& slot = ring.slots[ring.next];
  ring.next = (ring.next + 1) % kStagingSlots;
  if (slot.copied == nullptr) {
    check(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming), "cudaEventCreate", index);
  } else {
    check(cudaEventSynchronize(slot.copied), "cudaEventSynchronize (staging slot)", index);
  }
  if (slot.capacity < bytes) {
    if (slot.host != nullptr) cudaFreeHost(slot.host);
    slot.host = nullptr;
    slot.capacity = 0;
    const size_t capacity = std::max<size_t>(bytes, size_t{64} << 10);
    check(cudaMallocHost(&slot.host, capacity), "cudaMallocHost (staging slot)", index);
    slot.capacity = capacity;
  }
  std::memcpy(slot.host, src, bytes);
  check(cudaMemcpyAsync(dst, slot.host, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync (upload)", index);
  check(cudaEventRecord(slot.copied, stream), "cudaEventRecord (staging slot)", index);
}

void zero_bytes(void* dst, size_t bytes, int index) {
  if (bytes == 0) return;
  check(cudaMemsetAsync(dst, 0, bytes, stream_for(index)), "cudaMemsetAsync", index);
}

}  // namespace omni::tensor::cuda

#include "tensor/cuda/kernels.h"

namespace omni::tensor::cuda {

Tensor upload_ints(const Tensor& host, int device) {
  Tensor on_device = Tensor::empty(host.shape(), host.dtype(), Device::cuda(device));
  upload_async(on_device.raw(), host.raw(), host.nbytes(), device);
  return on_device;
}

}  // namespace omni::tensor::cuda
