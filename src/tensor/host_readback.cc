#include "tensor/host_readback.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/error.h"

#ifdef OMNI_HAVE_CUDA
#include <cuda_runtime.h>

#include "tensor/cuda/device.h"
#endif

namespace omni::tensor {

struct HostReadback::State {
  bool pending = false;
  Shape shape;
  DType dtype = DType::kI32;
  // Plain host memory for CPU sources.
  std::vector<char> host_bytes;
#ifdef OMNI_HAVE_CUDA
  int device = -1;        // of the pending copy; -1: it came from the host
  int event_device = -1;  // where `landed` was created
  void* pinned = nullptr;
  size_t capacity = 0;
  cudaEvent_t landed = nullptr;
  ~State() {
    if (landed != nullptr) cudaEventDestroy(landed);
    if (pinned != nullptr) cudaFreeHost(pinned);
  }
#endif
};

HostReadback::HostReadback() : state_(std::make_unique<State>()) {}
HostReadback::~HostReadback() = default;
HostReadback::HostReadback(HostReadback&&) noexcept = default;
HostReadback& HostReadback::operator=(HostReadback&&) noexcept = default;

bool HostReadback::pending() const { return state_ != nullptr && state_->pending; }

void HostReadback::start(const Tensor& src) {
  if (!src.defined() || !src.is_contiguous()) {
    throw_error(ErrorCode::kInvalidArgument, "HostReadback::start: the source must be a defined, contiguous tensor");
  }
  if (state_ == nullptr) state_ = std::make_unique<State>();
  State& s = *state_;
  if (s.pending) {
    throw_error(ErrorCode::kInternal, "HostReadback::start: the previous copy was not waited for");
  }
  s.shape = src.shape();
  s.dtype = src.dtype();
  const size_t bytes = src.nbytes();
  if (src.device().type == DeviceType::kCpu) {
#ifdef OMNI_HAVE_CUDA
    s.device = -1;
#endif
    s.host_bytes.resize(std::max<size_t>(bytes, 1));  // never null, so the result is a defined tensor
    if (bytes > 0) std::memcpy(s.host_bytes.data(), src.raw(), bytes);
    s.pending = true;
    return;
  }
#ifdef OMNI_HAVE_CUDA
  const int index = src.device().index;
  cudaStream_t stream = cuda::stream_for(index);
  if (s.landed != nullptr && s.event_device != index) {
    cudaEventDestroy(s.landed);
    s.landed = nullptr;
  }
  if (s.landed == nullptr) {
    cuda::check(cudaEventCreateWithFlags(&s.landed, cudaEventDisableTiming), "cudaEventCreate (host readback)", index);
    s.event_device = index;
  }
  s.device = index;
  if (s.capacity < bytes) {
    if (s.pinned != nullptr) cudaFreeHost(s.pinned);
    s.pinned = nullptr;
    s.capacity = 0;
    const size_t capacity = std::max<size_t>(bytes, 4096);
    cuda::check(cudaMallocHost(&s.pinned, capacity), "cudaMallocHost (host readback)", index);
    s.capacity = capacity;
  }
  if (bytes > 0) {
    cuda::check(cudaMemcpyAsync(s.pinned, src.raw(), bytes, cudaMemcpyDeviceToHost, stream),
                "cudaMemcpyAsync (host readback)", index);
  }
  cuda::check(cudaEventRecord(s.landed, stream), "cudaEventRecord (host readback)", index);
  s.pending = true;
#else
  throw_error(ErrorCode::kUnsupported, "HostReadback::start: {} needs the CUDA backend", device_name(src.device()));
#endif
}

Tensor HostReadback::wait() {
  if (!pending()) throw_error(ErrorCode::kInternal, "HostReadback::wait: no copy is pending");
  State& s = *state_;
  s.pending = false;
  void* data = s.host_bytes.data();
#ifdef OMNI_HAVE_CUDA
  if (s.device >= 0) {
    const int index = s.device;
    s.device = -1;
    cuda::check(cudaEventSynchronize(s.landed), "cudaEventSynchronize (host readback)", index);
    cuda::raise_device_error(index);
    data = s.pinned;
  }
#endif
  return Tensor::borrow(data, s.shape, s.dtype);
}

}  // namespace omni::tensor
