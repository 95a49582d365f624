#include "engine/lru_evictor.h"

#include <cassert>

namespace omni::engine {

LruEvictor::LruEvictor(int num_blocks) : prev_(num_blocks, kNone), next_(num_blocks, kNone), in_list_(num_blocks) {}

void LruEvictor::add(int32_t block) {
  assert(!in_list_[block]);
  in_list_[block] = true;
  prev_[block] = tail_;
  next_[block] = kNone;
  if (tail_ != kNone) {
    next_[tail_] = block;
  } else {
    head_ = block;
  }
  tail_ = block;
  ++size_;
}

bool LruEvictor::remove(int32_t block) {
  if (!in_list_[block]) return false;
  in_list_[block] = false;
  int32_t p = prev_[block];
  int32_t n = next_[block];
  if (p != kNone) {
    next_[p] = n;
  } else {
    head_ = n;
  }
  if (n != kNone) {
    prev_[n] = p;
  } else {
    tail_ = p;
  }
  --size_;
  return true;
}

std::optional<int32_t> LruEvictor::pop_lru() {
  if (head_ == kNone) return std::nullopt;
  int32_t block = head_;
  remove(block);
  return block;
}

}  // namespace omni::engine
