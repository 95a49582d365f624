#include "engine/scheduler.h"

#include <algorithm>

namespace omni::engine {

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager& kv)
    : config_(config), kv_(kv), admission_(config.max_num_seqs, kv) {}

void Scheduler::add(Sequence& seq) { admission_.enqueue(seq); }

void Scheduler::remove(Sequence& seq) { admission_.remove(seq); }

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int budget = config_.max_num_batched_tokens;

  // Preemption only ever removes sequences from the back of the running set, which this loop has
  // not reached yet (or the current one), so index-based iteration stays valid.
  const std::vector<Sequence*>& running = admission_.running();
  for (size_t i = 0; i < running.size() && budget > 0; ++i) {
    Sequence* seq = running[i];
    int wanted = seq->num_tokens() + seq->num_placeholders - seq->num_computed_tokens;
    // Nothing to feed: the sequence's last token is still on the device and will end it; or its
    // next row waits for streamed input.
    if (wanted == 0 || seq->awaiting_input) continue;
    int granted = std::min(wanted, budget);
    if (granted < wanted && !config_.enable_chunked_prefill) continue;
    if (!admission_.reserve(*seq, granted, out.preempted)) break;
    out.scheduled.push_back({seq, seq->num_computed_tokens, granted, granted == wanted});
    budget -= granted;
  }

  if (out.preempted.empty()) {
    while (budget > 0) {
      Sequence* head = admission_.admissible_head();
      if (!head || head->awaiting_input) break;
      PrefixHit hit = kv_.find_prefix(*head);
      int wanted = head->num_tokens() - hit.num_tokens;
      if (wanted > budget && !config_.enable_chunked_prefill) break;
      int granted = std::min(wanted, budget);
      if (!admission_.admit_head(granted, hit)) break;
      out.scheduled.push_back({head, head->num_computed_tokens, granted, granted == wanted});
      budget -= granted;
    }
  }
  out.num_batched_tokens = config_.max_num_batched_tokens - budget;
  return out;
}

void Scheduler::complete(const SchedulerOutput& output) {
  for (const ScheduledSequence& s : output.scheduled) {
    // Finished while the step ran (async scheduling): its blocks are gone already.
    if (s.seq->status == SequenceStatus::kFinished) continue;
    s.seq->num_computed_tokens += s.num_new_tokens;
    kv_.cache_computed_blocks(*s.seq);
  }
}

}  // namespace omni::engine
