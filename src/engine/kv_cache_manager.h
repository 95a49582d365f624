// The engine's half of the paged KV cache: which pool blocks each sequence holds, growing them as
// sequences advance, sharing full prompt blocks through the prefix cache, and giving them back.
// The model's half (the storage behind the block ids) is model::CausalLm.
//
// With prefix caching, a full block is registered in the cache once a forward has written its KV
// (never at allocation time, so that no sequence can read a block that the same forward is still
// writing), and a sequence entering the running set takes the longest chain of cached blocks that
// matches its tokens, short of its last token (whose logits must be computed). A sequence with an
// embedded prompt (rows, not tokens) is neither looked up nor registered.
//
// Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/block_pool.h"
#include "engine/sequence.h"

namespace omni::engine {

struct PrefixCacheStats {
  uint64_t queried_blocks = 0;  // full blocks looked up when sequences entered the running set
  uint64_t hit_blocks = 0;      // of those, found in the cache
  uint64_t miss_blocks = 0;     // of those, not found
  uint64_t hit_tokens = 0;      // tokens whose prefill the hits saved
  uint64_t evictions = 0;       // cached blocks dropped to reuse their storage
};

// The cached blocks a sequence can start from.
struct PrefixHit {
  std::vector<int32_t> blocks;
  int num_tokens = 0;
  int num_queried_blocks = 0;
};

class KvCacheManager {
 public:
  KvCacheManager(int num_blocks, bool enable_prefix_caching);

  static int blocks_for_tokens(int num_tokens);

  int num_blocks() const { return pool_.num_blocks(); }
  // Blocks that a new allocation can take (free or evictable).
  int num_free_blocks() const { return pool_.num_available(); }
  bool prefix_caching() const { return prefix_caching_; }
  PrefixCacheStats stats() const;
  const BlockPool& pool() const { return pool_; }

  // The cached prefix `seq` (holding no blocks) could start from; empty without prefix caching.
  // Pure lookup: takes no references and counts nothing until allocate() uses it.
  PrefixHit find_prefix(Sequence& seq);
  // Makes `seq` hold blocks for num_computed_tokens (+ hit tokens) + num_new_tokens tokens: takes the
  // hit's blocks (only for a sequence holding none) and allocates the rest. All or nothing: returns
  // false, changing nothing, when the pool has too few available blocks.
  bool allocate(Sequence& seq, int num_new_tokens, const PrefixHit* hit = nullptr);
  // Registers in the prefix cache the blocks of `seq` that its computed tokens have filled.
  void cache_computed_blocks(Sequence& seq);
  // Drops every block reference of `seq` (last block first, so that a sequence's tail is evicted
  // before its more shareable head) and resets its computed tokens to 0.
  void free(Sequence& seq);
  // Forgets every block and the prefix cache (sleep mode: the storage behind them was freed). No
  // sequence may hold blocks.
  void reset();

 private:
  BlockPool pool_;
  bool prefix_caching_;
  PrefixCacheStats stats_;
};

}  // namespace omni::engine
