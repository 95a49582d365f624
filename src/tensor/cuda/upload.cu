// upload_elements (upload.h): checkpoint bytes to device memory through pinned staging buffers.
// A few chunks of kChunkBytes rotate: the host fills one (pread from the file, or a memcpy, spread
// over the CPU pool) while the copy engine moves the ones before it, and a chunk is
// refilled only once its event says its copy has left it. A chunk in another dtype lands in a device
// scratch buffer and a kernel converts it into place, so the host never converts element by element.
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "tensor/cpu/thread_pool.h"
#include "tensor/cuda/common.cuh"
#include "tensor/cuda/upload.h"

namespace omni::tensor::cuda {
namespace {

constexpr size_t kChunkBytes = size_t{16} << 20;
constexpr int kChunks = 4;
// The host copy is split into pieces of this size over the CPU pool.
constexpr int64_t kPieceBytes = int64_t{1} << 20;

struct LoadStaging {
  std::mutex mutex;
  std::array<void*, kChunks> host{};
  std::array<cudaEvent_t, kChunks> copied{};
  std::array<bool, kChunks> in_flight{};
  int next = 0;
};

// Called after stream_for(device), which has checked the index.
LoadStaging& load_staging_for(int device) {
  static std::mutex guard;
  static std::map<int, LoadStaging> staging;  // lives as long as the process
  std::lock_guard lock(guard);
  return staging[device];
}

template <typename From, typename To>
__global__ void convert_kernel(const From* src, To* dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = from_float<To>(to_float(src[i]));
  }
}

void convert_async(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n, cudaStream_t stream,
                   int device) {
  with_float_type(src_dtype, [&](auto from_tag) {
    with_float_type(dst_dtype, [&](auto to_tag) {
      using From = decltype(from_tag);
      using To = decltype(to_tag);
      constexpr int kThreads = 256;
      convert_kernel<From, To>
          <<<blocks_for(n, kThreads), kThreads, 0, stream>>>(static_cast<const From*>(src), static_cast<To*>(dst), n);
    });
  });
  check(cudaGetLastError(), "convert_kernel", device);
}

}  // namespace

int upload_elements(void* dst, DType dst_dtype, const void* src, int fd, int64_t offset, DType src_dtype, size_t count,
                    int device) {
  if (count == 0) return 0;
  const size_t in_size = dtype_size(src_dtype), out_size = dtype_size(dst_dtype);
  const bool convert = src_dtype != dst_dtype;
  cudaStream_t stream = stream_for(device);
  LoadStaging& staging = load_staging_for(device);
  std::lock_guard lock(staging.mutex);
  const size_t chunk_elements = kChunkBytes / in_size;
  // Converted chunks land here first; stream order keeps a chunk's copy after the previous one's
  // conversion, and the caching allocator's reuse after both.
  Tensor scratch;
  if (convert) {
    const size_t bytes = std::min(count, chunk_elements) * in_size;
    scratch = Tensor::empty({static_cast<int64_t>((bytes + 3) / 4)}, DType::kF32, Device::cuda(device));
  }
  const auto* from = static_cast<const unsigned char*>(src);
  auto* to = static_cast<unsigned char*>(dst);
  for (size_t done = 0; done < count; done += chunk_elements) {
    const size_t n = std::min(chunk_elements, count - done);
    const int slot = staging.next;
    staging.next = (staging.next + 1) % kChunks;
    if (staging.host[slot] == nullptr) {
      check(cudaMallocHost(&staging.host[slot], kChunkBytes), "cudaMallocHost (load staging)", device);
      check(cudaEventCreateWithFlags(&staging.copied[slot], cudaEventDisableTiming), "cudaEventCreate", device);
    } else if (staging.in_flight[slot]) {
      check(cudaEventSynchronize(staging.copied[slot]), "cudaEventSynchronize (load staging)", device);
    }
    const int64_t bytes = static_cast<int64_t>(n * in_size);
    auto* chunk = static_cast<unsigned char*>(staging.host[slot]);
    const unsigned char* source = from + done * in_size;
    std::atomic<int> read_error{0};
    cpu::parallel_for((bytes + kPieceBytes - 1) / kPieceBytes, 1, [&](int64_t begin, int64_t end) {
      const int64_t first = begin * kPieceBytes, last = std::min(bytes, end * kPieceBytes);
      if (fd < 0) {
        std::memcpy(chunk + first, source + first, static_cast<size_t>(last - first));
        return;
      }
      const int64_t at = offset + static_cast<int64_t>(done * in_size);
      for (int64_t got = first; got < last;) {
        const ssize_t n = ::pread(fd, chunk + got, static_cast<size_t>(last - got), static_cast<off_t>(at + got));
        if (n > 0) {
          got += n;
        } else if (n == 0 || errno != EINTR) {
          read_error = n == 0 ? EIO : errno;
          return;
        }
      }
    });
    if (read_error != 0) return read_error;
    void* landing = convert ? scratch.raw() : static_cast<void*>(to + done * out_size);
    check(cudaMemcpyAsync(landing, chunk, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync (load staging)", device);
    check(cudaEventRecord(staging.copied[slot], stream), "cudaEventRecord (load staging)", device);
    staging.in_flight[slot] = true;
    if (convert)
      convert_async(landing, src_dtype, to + done * out_size, dst_dtype, static_cast<int64_t>(n), stream, device);
  }
  return 0;
}

}  // namespace omni::tensor::cuda
