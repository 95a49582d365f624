// The CUDA backend's Communicator: the ranks' CUDA tensors meet through NCCL, one process and one
// device per rank; host control messages go through a host communicator (the shared-memory one),
// which also carries NCCL's unique id from rank 0 to the others.
//
// NCCL is loaded at run time with dlopen ($OMNI_NCCL_LIBRARY, else libnccl.so.2 on the library
// path), so omnistage starts on machines without it; only a tensor-parallel CUDA stage needs it.
//
// Collectives are queued on the device's stream (tensor/cuda/device.h) and return at once, like
// the ops; results are read in stream order. A dead peer is noticed by the host communicator at
// the next control message; a collective already queued waits for NCCL's own timeout.
//
// Errors: kUnavailable naming the library when NCCL cannot be loaded or a rank cannot join;
// kInternal with NCCL's message for a failed call; kInvalidArgument for tensors that are not
// contiguous CUDA tensors of this rank's device in float32, bfloat16 or float16.
#pragma once

#include <memory>
#include <string>

#include "tensor/communicator.h"

namespace omni::tensor::cuda {

struct NcclLibrary;

class NcclCommunicator final : public Communicator {
 public:
  // Joins every rank of `host` into one NCCL communicator on CUDA device `device` (this
  // process's). Every rank constructs one at the same time.
  NcclCommunicator(std::unique_ptr<Communicator> host, int device);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return host_->rank(); }
  int world_size() const override { return host_->world_size(); }
  void all_reduce_sum(Tensor& x) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  void broadcast_bytes(std::string& bytes) override { host_->broadcast_bytes(bytes); }

 private:
  void check_tensor(const Tensor& t, const char* op) const;

  std::unique_ptr<Communicator> host_;
  int device_ = 0;
  const NcclLibrary* nccl_ = nullptr;
  void* comm_ = nullptr;  // ncclComm_t
};

}  // namespace omni::tensor::cuda
