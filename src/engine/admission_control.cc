#include "engine/admission_control.h"

#include <algorithm>
#include <cassert>

namespace omni::engine {

AdmissionControl::AdmissionControl(int max_num_seqs, KvCacheManager& kv) : max_num_seqs_(max_num_seqs), kv_(kv) {}

void AdmissionControl::enqueue(Sequence& seq) {
  seq.status = SequenceStatus::kWaiting;
  waiting_.push_back(&seq);
}

void AdmissionControl::remove(Sequence& seq) {
  if (auto it = std::find(running_.begin(), running_.end(), &seq); it != running_.end()) {
    running_.erase(it);
  } else if (auto w = std::find(waiting_.begin(), waiting_.end(), &seq); w != waiting_.end()) {
    waiting_.erase(w);
  }
  kv_.free(seq);
}

Sequence* AdmissionControl::admissible_head() const {
  if (waiting_.empty() || static_cast<int>(running_.size()) >= max_num_seqs_) return nullptr;
  return waiting_.front();
}

bool AdmissionControl::admit_head(int num_new_tokens, const PrefixHit& hit) {
  Sequence* seq = admissible_head();
  assert(seq);
  // A reserving sequence takes the blocks of its whole life now.
  const int reserved = seq->reserved_tokens - seq->num_computed_tokens - hit.num_tokens;
  if (!kv_.allocate(*seq, std::max(num_new_tokens, reserved), &hit)) return false;
  waiting_.pop_front();
  seq->status = SequenceStatus::kRunning;
  running_.push_back(seq);
  return true;
}

bool AdmissionControl::reserve(Sequence& seq, int num_new_tokens, std::vector<Sequence*>& preempted) {
  assert(seq.status == SequenceStatus::kRunning);
  while (!kv_.allocate(seq, num_new_tokens)) {
    bool self = running_.back() == &seq;
    preempt_newest(preempted);
    if (self) return false;
  }
  return true;
}

void AdmissionControl::preempt_newest(std::vector<Sequence*>& preempted) {
  Sequence* victim = running_.back();
  running_.pop_back();
  kv_.free(*victim);
  victim->status = SequenceStatus::kPreempted;
  ++victim->num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(victim);
  preempted.push_back(victim);
}

}  // namespace omni::engine
