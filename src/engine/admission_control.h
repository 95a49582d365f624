// Admission control (the capacity half of scheduling, kept apart from batch formation as in
// TensorRT-LLM): which sequences hold a place in the running set. It admits waiting sequences in
// arrival order (FCFS; a head that does not fit blocks the ones behind it) while the running set is
// below max_num_seqs and the KV pool has blocks for what they will compute, and it preempts by
// recompute when a running sequence cannot grow: the most recently admitted running sequence gives
// back all its blocks and returns to the head of the waiting queue with its tokens kept, to be
// prefilled again later (its output does not change: it recomputes the same KV). A sequence with
// reserved_tokens gets blocks for all of them on admission and never asks for more, so where every
// sequence reserves (ArEngine with a model that cannot recompute) none is ever preempted.
//
// Not thread-safe: the engine thread owns it.
#pragma once

#include <deque>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/sequence.h"

namespace omni::engine {

class AdmissionControl {
 public:
  AdmissionControl(int max_num_seqs, KvCacheManager& kv);

  // Queues a new sequence behind every waiting one.
  void enqueue(Sequence& seq);
  // Takes an unfinished sequence out of the waiting queue or the running set and frees its blocks.
  void remove(Sequence& seq);

  // The waiting head if the running set has room for one more sequence, else nullptr.
  Sequence* admissible_head() const;
  // Moves the waiting head into the running set, holding blocks for `hit` plus `num_new_tokens` (or
  // its reserved_tokens, when more).
  // Returns false, changing nothing, when the pool is short of blocks.
  bool admit_head(int num_new_tokens, const PrefixHit& hit);
  // Gives running `seq` blocks for `num_new_tokens` more tokens, preempting the most recently
  // admitted running sequences (appended to `preempted`) while the pool is short. Returns false when
  // `seq` itself had to be preempted.
  bool reserve(Sequence& seq, int num_new_tokens, std::vector<Sequence*>& preempted);

  // In admission order.
  const std::vector<Sequence*>& running() const { return running_; }
  // In the order they will be admitted.
  const std::deque<Sequence*>& waiting() const { return waiting_; }
  uint64_t num_preemptions() const { return num_preemptions_; }

 private:
  void preempt_newest(std::vector<Sequence*>& preempted);

  int max_num_seqs_;
  KvCacheManager& kv_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;
  uint64_t num_preemptions_ = 0;
};

}  // namespace omni::engine
