// Batch formation: one scheduler iteration picks which running sequences advance by how many
// tokens, within max_num_batched_tokens — one token for a decoding sequence, a chunk of the prompt
// for a prefilling one (with enable_chunked_prefill a prompt may be split across steps, so that
// prefill chunks share a batch with decodes instead of stalling them). Running sequences go first,
// in admission order; the remaining token budget then goes to admitting waiting sequences through
// AdmissionControl (no admission in a step that had to preempt: the pool is already short). A
// sequence awaiting streamed input is passed over (running) or holds admission up (waiting head).
//
// Not thread-safe: the engine thread owns it.
#pragma once

#include <vector>

#include "engine/admission_control.h"
#include "engine/kv_cache_manager.h"
#include "engine/sequence.h"

namespace omni::engine {

struct SchedulerConfig {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  bool enable_chunked_prefill = true;
};

struct ScheduledSequence {
  Sequence* seq = nullptr;
  int context_len = 0;     // tokens already in the KV cache when scheduled
  int num_new_tokens = 0;  // fed to the model starting at position context_len
  // Whether this step reaches the end of the sequence's tokens, so its logits give the next token.
  bool samples = false;
};

struct SchedulerOutput {
  std::vector<ScheduledSequence> scheduled;  // in batch order
  std::vector<Sequence*> preempted;          // preempted in this step (not in `scheduled`)
  int num_batched_tokens = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvCacheManager& kv);

  const SchedulerConfig& config() const { return config_; }
  // Queues a new sequence (FCFS).
  void add(Sequence& seq);
  // Takes an unfinished sequence out (finished or aborted) and frees its blocks.
  void remove(Sequence& seq);

  // One iteration's batch. Every scheduled sequence holds blocks for its new tokens.
  SchedulerOutput schedule();
  // Records that the model has written (or, on a device that runs steps in order, has been given)
  // the KV of every scheduled token: advances num_computed_tokens and registers newly filled blocks
  // in the prefix cache. Sequences finished since schedule() are skipped. Every token it registers
  // must be in token_ids (no placeholders left in the step).
  void complete(const SchedulerOutput& output);

  int num_running() const { return static_cast<int>(admission_.running().size()); }
  int num_waiting() const { return static_cast<int>(admission_.waiting().size()); }
  uint64_t num_preemptions() const { return admission_.num_preemptions(); }
  const AdmissionControl& admission() const { return admission_; }

 private:
  SchedulerConfig config_;
  KvCacheManager& kv_;
  AdmissionControl admission_;
};

}  // namespace omni::engine
