#include "engine/kv_cache_manager.h"

#include <cassert>

#include "model/causal_lm.h"

namespace omni::engine {

using model::kKvBlockSize;

KvCacheManager::KvCacheManager(int num_blocks, bool enable_prefix_caching)
    : pool_(num_blocks), prefix_caching_(enable_prefix_caching) {}

void KvCacheManager::reset() {
  pool_ = BlockPool(pool_.num_blocks());
  stats_ = {};
}

int KvCacheManager::blocks_for_tokens(int num_tokens) { return (num_tokens + kKvBlockSize - 1) / kKvBlockSize; }

PrefixCacheStats KvCacheManager::stats() const {
  PrefixCacheStats s = stats_;
  s.evictions = pool_.num_evictions();
  return s;
}

PrefixHit KvCacheManager::find_prefix(Sequence& seq) {
  PrefixHit hit;
  if (!prefix_caching_ || seq.embedded_prompt || seq.media_prompt || seq.feeds_downstream || !seq.block_ids.empty()) return hit;
  // The last token is always recomputed: its logits are what the forward is for.
  int max_blocks = (seq.num_tokens() - 1) / kKvBlockSize;
  hit.num_queried_blocks = max_blocks;
  std::span<const int32_t> tokens(seq.token_ids);
  extend_block_hashes(tokens.first(size_t(max_blocks) * kKvBlockSize), seq.block_hashes);
  for (int i = 0; i < max_blocks; ++i) {
    auto block = pool_.find_cached(seq.block_hashes[i], tokens.subspan(size_t(i) * kKvBlockSize, kKvBlockSize));
    if (!block) break;
    hit.blocks.push_back(*block);
  }
  hit.num_tokens = static_cast<int>(hit.blocks.size()) * kKvBlockSize;
  return hit;
}

bool KvCacheManager::allocate(Sequence& seq, int num_new_tokens, const PrefixHit* hit) {
  assert(!hit || seq.block_ids.empty());
  int hit_blocks = hit ? static_cast<int>(hit->blocks.size()) : 0;
  int hit_tokens = hit ? hit->num_tokens : 0;
  int needed = blocks_for_tokens(seq.num_computed_tokens + hit_tokens + num_new_tokens) -
               static_cast<int>(seq.block_ids.size()) - hit_blocks;
  // Reviving an evictable hit block takes it out of the available count.
  int available = pool_.num_available();
  for (int i = 0; i < hit_blocks; ++i) {
    if (pool_.ref_count(hit->blocks[i]) == 0) --available;
  }
  if (needed > available) return false;

  if (hit) {
    for (int32_t block : hit->blocks) pool_.ref(block);
    seq.block_ids = hit->blocks;
    seq.num_computed_tokens = hit_tokens;
    seq.num_cached_blocks = hit_blocks;
    stats_.queried_blocks += hit->num_queried_blocks;
    stats_.hit_blocks += hit_blocks;
    stats_.miss_blocks += hit->num_queried_blocks - hit_blocks;
    stats_.hit_tokens += hit_tokens;
  }
  for (int i = 0; i < needed; ++i) {
    auto block = pool_.allocate();
    assert(block);
    seq.block_ids.push_back(*block);
  }
  return true;
}

void KvCacheManager::cache_computed_blocks(Sequence& seq) {
  if (!prefix_caching_ || seq.embedded_prompt || seq.media_prompt || seq.feeds_downstream) return;
  int full = seq.num_computed_tokens / kKvBlockSize;
  if (full <= seq.num_cached_blocks) return;
  std::span<const int32_t> tokens(seq.token_ids);
  extend_block_hashes(tokens.first(size_t(full) * kKvBlockSize), seq.block_hashes);
  for (int i = seq.num_cached_blocks; i < full; ++i) {
    pool_.cache(seq.block_ids[i], seq.block_hashes[i], tokens.subspan(size_t(i) * kKvBlockSize, kKvBlockSize));
  }
  seq.num_cached_blocks = full;
}

void KvCacheManager::free(Sequence& seq) {
  for (auto it = seq.block_ids.rbegin(); it != seq.block_ids.rend(); ++it) pool_.unref(*it);
  seq.block_ids.clear();
  seq.num_computed_tokens = 0;
  seq.num_cached_blocks = 0;
}

}  // namespace omni::engine
