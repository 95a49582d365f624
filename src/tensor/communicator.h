// A tensor-parallel group: `world_size` ranks, one per process (and per device), that run the
// same model shard by shard and meet in collective operations.
//
// Every rank must call the same collectives in the same order with tensors of the same shape;
// a collective returns on a rank once that rank's result is complete. Implementations:
// tensor/cpu/shm_communicator.h (processes on one host over POSIX shared memory) and
// tensor/cuda/nccl_communicator.h (CUDA tensors through NCCL).
//
// Errors: a collective throws omni::Error(kUnavailable) naming the rank at fault when a peer
// died or left the group; the group is unusable afterwards (the stage fails as a whole).
// kInvalidArgument for a tensor of the wrong device, dtype or layout.
//
// Threads: one thread per rank uses a communicator at a time.
#pragma once

#include <memory>
#include <string>

#include "tensor/tensor.h"

namespace omni::tensor {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // x = the sum of every rank's x, elementwise, in place. Every rank ends with the same bits
  // (the ranks' values are added in rank order), so replicated activations stay identical.
  virtual void all_reduce_sum(Tensor& x) = 0;
  // out = the ranks' `in` concatenated in rank order: out.numel() == world_size * in.numel(),
  // same dtype and device. out must not alias in.
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  // Host-side control messages: rank 0's `bytes` replace every other rank's `bytes`.
  virtual void broadcast_bytes(std::string& bytes) = 0;
};

// The communicator a rank's shard uses on `device`: `host` itself for the CPU; on CUDA, NCCL
// between the ranks' devices with `host` carrying the control messages (every rank calls this at
// the same time). kUnsupported for CUDA in a build without the CUDA backend; what the NCCL
// communicator throws otherwise.
std::unique_ptr<Communicator> make_device_communicator(std::unique_ptr<Communicator> host, Device device);

}  // namespace omni::tensor
