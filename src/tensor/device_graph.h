// A recording of the ops one thread queues on a CUDA device's stream, replayed with one launch (a
// CUDA graph): the kernels, their arguments and the device addresses they touch are fixed at
// capture, so a replay costs one launch instead of hundreds and reads its inputs from the same
// buffers the recording used. The recorded ops must therefore take every input from device memory
// the caller keeps alive and rewrites between replays (ops.h: device-resident index tensors,
// paged_decode_attention), never host tensors, and must not synchronise.
//
// Memory: tensors allocated while recording come from the device's graph pool
// (cuda/allocator.h), which eager ops never use; a tensor the caller keeps from the recording (an
// output) stays reserved until dropped, the rest is free for the next recording. Replays of all
// graphs of a device run one at a time on its stream, so they may share the pool's blocks.
//
// Threads: capture() records only the calling thread's ops (others may not queue ops on the device
// meanwhile); a DeviceGraph is used by one thread at a time. Errors: omni::Error(kUnsupported) for a
// CPU device or a build without CUDA; kInternal naming the CUDA call when recording or replay fails
// (an op that synchronises or uploads host memory while recording ends the recording this way).
#pragma once

#include <functional>
#include <memory>

#include "tensor/device.h"

namespace omni::tensor {

class DeviceGraph {
 public:
  DeviceGraph() = default;

  // Runs `record` on the calling thread twice: once eagerly (a warm-up, which must leave the same
  // state as a replay would), then capturing what it queues on `device`'s stream.
  static DeviceGraph capture(Device device, const std::function<void()>& record);

  // Queues the recorded ops on the device's stream; returns without waiting for them.
  void replay() const;
  bool defined() const { return state_ != nullptr; }

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace omni::tensor
