// The CPU backend's Communicator: the ranks are processes on one host that share one POSIX
// shared-memory segment, /omnistage_tp_<creator pid>_<n>, with a slot of `slot_bytes` per rank
// and a barrier (atomics + a process-shared futex) in its header.
//
// A collective copies each rank's part into its slot, meets at the barrier, reads every slot,
// and meets again before the slots are reused; tensors larger than a slot go in slot-sized
// pieces. all_reduce_sum adds the slots in rank order on every rank, so every rank computes the
// same bits.
//
// Lifetime of the name: rank 0 creates the segment; every rank attaches; join() returns once all
// have, and rank 0 then unlinks the name, so /dev/shm holds nothing after join() whatever happens
// to the processes later. Before join(), rank 0's destructor unlinks it (an error path).
//
// Failure: while a rank waits at the barrier it calls its PeerCheck every few milliseconds; the
// check throws omni::Error(kUnavailable) naming a dead peer (the process that started the ranks
// knows how to tell, e.g. by reaping its children). A rank whose communicator is destroyed
// marks the group closed, and peers waiting in a collective then fail with kUnavailable too.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "tensor/communicator.h"

namespace omni::tensor::cpu {

// Throws omni::Error(kUnavailable) naming the peer when one of the group's processes is gone.
using PeerCheck = std::function<void()>;

inline constexpr size_t kDefaultShmSlotBytes = size_t{4} << 20;
inline constexpr int kMaxShmRanks = 64;

class ShmCommunicator final : public Communicator {
 public:
  // Rank 0: creates a new segment for `world_size` ranks (1..kMaxShmRanks). Throws
  // kInvalidArgument for a bad size, kUnavailable when the segment cannot be created.
  static std::unique_ptr<ShmCommunicator> create(int world_size, PeerCheck check,
                                                 size_t slot_bytes = kDefaultShmSlotBytes);
  // Ranks 1..world_size-1: attach to the segment `name` rank 0 created. Throws kUnavailable when
  // it does not exist (any more), kInvalidArgument when it was made for another world size.
  static std::unique_ptr<ShmCommunicator> attach(const std::string& name, int rank, int world_size, PeerCheck check);

  ~ShmCommunicator() override;
  ShmCommunicator(const ShmCommunicator&) = delete;
  ShmCommunicator& operator=(const ShmCommunicator&) = delete;

  const std::string& name() const { return name_; }
  // Waits until every rank has attached, then (rank 0) unlinks the name.
  void join();
  void barrier();

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  // CPU float32 tensors, contiguous.
  void all_reduce_sum(Tensor& x) override;
  // CPU tensors of one dtype, contiguous.
  void all_gather(const Tensor& in, Tensor& out) override;
  void broadcast_bytes(std::string& bytes) override;

 private:
  struct Header;
  ShmCommunicator(std::string name, int rank, int world_size, PeerCheck check);
  void map(int fd, size_t size);
  unsigned char* slot(int rank) const;
  void unlink_name();

  std::string name_;
  int rank_ = 0;
  int world_size_ = 0;
  PeerCheck check_;
  size_t slot_bytes_ = 0;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  Header* header_ = nullptr;
  bool linked_ = false;
};

}  // namespace omni::tensor::cpu
