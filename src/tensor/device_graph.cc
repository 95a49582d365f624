#include "tensor/device_graph.h"

#include "base/error.h"

#ifdef OMNI_HAVE_CUDA
#include <cuda_runtime.h>

#include "tensor/cuda/allocator.h"
#include "tensor/cuda/device.h"
#endif

namespace omni::tensor {

#ifdef OMNI_HAVE_CUDA

struct DeviceGraph::State {
  int device = 0;
  cudaGraphExec_t exec = nullptr;
  ~State() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
  }
};

DeviceGraph DeviceGraph::capture(Device device, const std::function<void()>& record) {
  if (device.type != DeviceType::kCuda) {
    throw_error(ErrorCode::kUnsupported, "device graphs need a cuda device, got {}", device_name(device));
  }
  const int index = device.index;
  cudaStream_t stream = cuda::stream_for(index);
  cudaGraph_t graph = nullptr;
  {
    cuda::GraphPoolScope pool(index);
    // A run outside the recording first: one-time setup (module loading, matrix-product plans) happens
    // there, and the pool caches every block the ops ask for, so that the recording, which asks for
    // the same sizes in the same order, allocates nothing from CUDA.
    record();
    cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize before a capture", index);
    cuda::raise_device_error(index);
    // Relaxed: should an op still allocate, the recording survives it.
    cuda::check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture", index);
    try {
      record();
    } catch (...) {
      cudaStreamEndCapture(stream, &graph);
      if (graph != nullptr) cudaGraphDestroy(graph);
      cudaGetLastError();
      throw;
    }
    cuda::check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture", index);
  }
  auto state = std::make_shared<State>();
  state->device = index;
  const cudaError_t status = cudaGraphInstantiate(&state->exec, graph, 0);
  cudaGraphDestroy(graph);
  cuda::check(status, "cudaGraphInstantiate", index);
  DeviceGraph out;
  out.state_ = std::move(state);
  return out;
}

void DeviceGraph::replay() const {
  if (!state_) throw_error(ErrorCode::kInternal, "replay of an empty device graph");
  cuda::check(cudaGraphLaunch(state_->exec, cuda::stream_for(state_->device)), "cudaGraphLaunch", state_->device);
}

#else

struct DeviceGraph::State {};

DeviceGraph DeviceGraph::capture(Device device, const std::function<void()>& record) {
  (void)record;
  throw_error(ErrorCode::kUnsupported, "device graphs need the cuda backend, which this build lacks ({} asked)",
              device_name(device));
}

void DeviceGraph::replay() const { throw_error(ErrorCode::kInternal, "replay of an empty device graph"); }

#endif

}  // namespace omni::tensor
