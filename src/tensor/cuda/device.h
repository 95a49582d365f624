// The CUDA device model (after ggml: device -> stream -> buffer). Each device has one stream on
// which every op and copy of this process runs, so stream order alone orders an op after the ops
// that produced its inputs; the caching allocator (cuda/allocator.h) relies on that order.
//
// Threads: the functions here are thread-safe; ops on one device from several threads serialise
// on its stream. Errors from the CUDA runtime are omni::Error(kInternal) naming the call and the
// device; a missing device is kUnavailable.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace omni::tensor::cuda {

// Number of visible devices; zero (not an error) without a driver or a GPU.
int visible_device_count();

// Makes `index` the calling thread's current device (checked against the visible devices) and
// returns its stream, created on first use and never destroyed.
cudaStream_t stream_for(int index);

// Multiprocessor count of the device, cached.
int multiprocessor_count(int index);

// Throws omni::Error(kInternal) "<what> on cuda:<device>: <CUDA error text>" when status is not
// cudaSuccess (clearing the runtime's sticky last error first).
void check(cudaError_t status, const char* what, int device);

// Throws omni::Error(kInternal): a kernel was handed a dtype the dispatcher should have refused.
[[noreturn]] void fail_dtype(DType dtype);

// Blocks until every op queued on the device's stream has finished, then raises the device's
// pending input error, if any (see DeviceErrorRecord).
void synchronize(int index);

// What a kernel found wrong in input values that only the GPU saw (ids or slots that live in
// device memory, so the dispatcher could not validate them without a synchronisation).
enum class DeviceErrorKind : int32_t {
  kNone = 0,
  kTokenId = 1,  // embedding: value = the id, index = its position in ids, limit = the vocabulary size
  kKvSlot = 2,   // store_kv: value = the slot, index = its token, limit = the cache's slots
  // paged_decode_attention: value = the block id, index = its row, limit = the cache's blocks
  kKvBlock = 3,
  // paged_decode_attention: value = the context length, index = its row, limit = what the tables hold
  kDecodeContext = 4,
  kFusedKvSlot = 5,  // qkv_norm_rope_store: as kKvSlot
};

// The first such error since the last report. It lives in host memory mapped into the device, so
// a kernel records it with plain stores and the host reads it after a synchronisation without a
// copy. Kernels claim it with atomicCAS on `kind` (so the first error wins), skip the offending
// element (an embedding row is zeroed, a KV slot is not written) and carry on.
struct DeviceErrorRecord {
  int32_t kind;  // a DeviceErrorKind
  int32_t unused;
  int64_t index;
  int64_t value;
  int64_t limit;
};

// The device's record, valid in kernels of that device; created on first use and never freed.
DeviceErrorRecord* device_error_record(int index);

// Throws omni::Error(kInvalidArgument) naming the op, the value, its index and the limit when a
// kernel recorded an error, and clears the record. Only meaningful after the stream has been
// synchronised; synchronize() and the copies to the host call it.
void raise_device_error(int index);

}  // namespace omni::tensor::cuda

namespace omni::tensor::cuda {

// Copies `bytes` between host and device memory (or within a device) of device `index` on its
// stream; returns when the destination holds the bytes (a copy to the host synchronises).
void copy_bytes(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, int index);

// Copies `bytes` of host memory to device memory on the device's stream without waiting for the
// work queued before it: the bytes go through one of a ring of pinned staging buffers, so `src`
// may be reused at once. (A pageable cudaMemcpyAsync would synchronise the stream first.) For
// per-op metadata such as attention block tables.
void upload_async(void* dst, const void* src, size_t bytes, int index);

// Fills `bytes` of device memory with zeros, queued on the device's stream.
void zero_bytes(void* dst, size_t bytes, int index);

}  // namespace omni::tensor::cuda
