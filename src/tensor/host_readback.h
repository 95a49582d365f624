// A copy of a device tensor back to the host that does not wait for the device: start() queues it
// behind the ops that produce the tensor and returns; wait() blocks until it has landed. The way
// an asynchronous step reads its sampled ids (CausalLm::launch_step/wait_step) while the host
// already prepares the next one.
//
// On a CUDA device the bytes land in pinned host memory that this object owns (a pageable
// destination would make the copy synchronous), copied on the device's stream (so after every op
// queued before start()) and followed by a recorded event that wait() synchronises on. On the CPU
// start() copies at once and wait() returns immediately.
//
// Ownership and threads: the host buffer belongs to the object and is reused by the next start(),
// which must come after wait() of the previous one (kInternal otherwise: the copy in flight would
// be overwritten). One thread at a time per object. Errors: kInvalidArgument for an undefined or
// non-contiguous source; CUDA failures and the device's pending input errors (cuda/device.h's
// DeviceErrorRecord) are omni::Error, the latter raised by wait().
#pragma once

#include <memory>

#include "tensor/tensor.h"

namespace omni::tensor {

class HostReadback {
 public:
  HostReadback();
  ~HostReadback();
  HostReadback(HostReadback&&) noexcept;
  HostReadback& operator=(HostReadback&&) noexcept;

  // Queues the copy of `src`'s bytes. The source must stay allocated until the copy has run
  // (tensors from the device's caching allocator may be released at once: their memory is reused
  // only by ops queued later on the same stream).
  void start(const Tensor& src);
  // Whether a copy was started and not yet waited for.
  bool pending() const;
  // Blocks until the copy started last has landed and returns it as a host tensor of the source's
  // shape and dtype that borrows this object's buffer (valid until the next start()). kInternal
  // when nothing is pending.
  Tensor wait();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace omni::tensor
