// The KV block pool: ids 0..num_blocks-1 of the blocks whose storage the model holds, with a
// reference count each and the prefix-cache index over them.
//
// A block is in exactly one state: referenced (by one or more sequences; shared prefix blocks have
// several references), free (unreferenced, holding nothing reusable), or evictable (unreferenced but
// still holding a cached prefix; ordered by the LruEvictor). Allocation prefers free blocks and
// evicts the least recently used evictable block only when none is free, so cached prefixes live as
// long as memory allows.
//
// Not thread-safe: the engine thread owns the pool (through KvCacheManager).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/block_hash.h"
#include "engine/lru_evictor.h"

namespace omni::engine {

class BlockPool {
 public:
  explicit BlockPool(int num_blocks);

  int num_blocks() const { return static_cast<int>(ref_counts_.size()); }
  // Blocks that allocate() can hand out: free plus evictable.
  int num_available() const { return static_cast<int>(free_.size()) + evictor_.size(); }
  int num_cached() const { return static_cast<int>(cached_.size()); }
  uint64_t num_evictions() const { return evictions_; }
  int ref_count(int32_t block) const { return ref_counts_[block]; }

  // Hands out an unreferenced block with one reference: a free one, else the least recently used
  // evictable one (whose cached prefix is dropped and counted as an eviction). nullopt when every
  // block is referenced — an expected condition that the scheduler answers by preempting.
  std::optional<int32_t> allocate();
  // Takes one more reference on `block` (a prefix-cache hit), reviving it if it was evictable.
  void ref(int32_t block);
  // Drops one reference; the last one makes the block evictable when it is cached, else free.
  void unref(int32_t block);

  // The cached block holding `tokens` (kKvBlockSize of them) after the prefix whose chain ends in
  // `hash`, or nullopt.
  std::optional<int32_t> find_cached(BlockHash hash, std::span<const int32_t> tokens) const;
  // Registers referenced `block` as holding `tokens` under `hash`. Returns false (and registers
  // nothing) when another block already caches that hash: the duplicate is freed normally later.
  bool cache(int32_t block, BlockHash hash, std::span<const int32_t> tokens);

 private:
  void uncache(int32_t block);

  std::vector<int> ref_counts_;
  std::vector<int32_t> free_;  // a stack; its order carries no meaning
  LruEvictor evictor_;
  std::unordered_map<BlockHash, int32_t> cached_;
  std::vector<std::optional<BlockHash>> block_hash_;
  std::vector<int32_t> block_tokens_;  // kKvBlockSize per block, meaningful while the block is cached
  uint64_t evictions_ = 0;
};

}  // namespace omni::engine
