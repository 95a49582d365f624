#include "engine/block_pool.h"

#include <algorithm>
#include <cassert>

#include "model/causal_lm.h"

namespace omni::engine {

using model::kKvBlockSize;

BlockPool::BlockPool(int num_blocks)
    : ref_counts_(num_blocks, 0),
      evictor_(num_blocks),
      block_hash_(num_blocks),
      block_tokens_(static_cast<size_t>(num_blocks) * kKvBlockSize) {
  free_.reserve(num_blocks);
  // Popped from the back, so block 0 goes first: allocation order is easy to follow in tests and logs.
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<int32_t> BlockPool::allocate() {
  int32_t block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (auto lru = evictor_.pop_lru()) {
    block = *lru;
    uncache(block);
    ++evictions_;
  } else {
    return std::nullopt;
  }
  assert(ref_counts_[block] == 0);
  ref_counts_[block] = 1;
  return block;
}

void BlockPool::ref(int32_t block) {
  if (ref_counts_[block] == 0) {
    bool was_evictable = evictor_.remove(block);
    assert(was_evictable);
    (void)was_evictable;
  }
  ++ref_counts_[block];
}

void BlockPool::unref(int32_t block) {
  assert(ref_counts_[block] > 0);
  if (--ref_counts_[block] > 0) return;
  if (block_hash_[block]) {
    evictor_.add(block);
  } else {
    free_.push_back(block);
  }
}

std::optional<int32_t> BlockPool::find_cached(BlockHash hash, std::span<const int32_t> tokens) const {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  const int32_t* stored = &block_tokens_[static_cast<size_t>(it->second) * kKvBlockSize];
  if (!std::equal(tokens.begin(), tokens.end(), stored)) return std::nullopt;
  return it->second;
}

bool BlockPool::cache(int32_t block, BlockHash hash, std::span<const int32_t> tokens) {
  assert(ref_counts_[block] > 0 && !block_hash_[block] && tokens.size() == static_cast<size_t>(kKvBlockSize));
  if (!cached_.emplace(hash, block).second) return false;
  block_hash_[block] = hash;
  std::copy(tokens.begin(), tokens.end(), &block_tokens_[static_cast<size_t>(block) * kKvBlockSize]);
  return true;
}

void BlockPool::uncache(int32_t block) {
  cached_.erase(*block_hash_[block]);
  block_hash_[block].reset();
}

}  // namespace omni::engine
