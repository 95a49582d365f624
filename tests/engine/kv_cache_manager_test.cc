#include "engine/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <numeric>

namespace omni::engine {
namespace {

Sequence make_sequence(int num_tokens, int32_t first_token = 0) {
  Sequence seq;
  seq.token_ids.resize(num_tokens);
  std::iota(seq.token_ids.begin(), seq.token_ids.end(), first_token);
  seq.num_prompt_tokens = num_tokens;
  return seq;
}

TEST(KvCacheManagerTest, AllocatesWholeBlocksAllOrNothing) {
  KvCacheManager kv(4, false);
  Sequence a = make_sequence(40);
  ASSERT_TRUE(kv.allocate(a, 40));
  EXPECT_EQ(a.block_ids.size(), 3u);
  a.num_computed_tokens = 40;
  a.token_ids.push_back(7);
  ASSERT_TRUE(kv.allocate(a, 1));  // position 40 still fits block 2
  EXPECT_EQ(a.block_ids.size(), 3u);

  Sequence b = make_sequence(20);
  EXPECT_FALSE(kv.allocate(b, 20)) << "needs 2 blocks, 1 is free";
  EXPECT_TRUE(b.block_ids.empty());
  EXPECT_EQ(kv.num_free_blocks(), 1);
  kv.free(a);
  EXPECT_EQ(kv.num_free_blocks(), 4);
  EXPECT_EQ(a.num_computed_tokens, 0);
  EXPECT_TRUE(kv.allocate(b, 20));
}

TEST(KvCacheManagerTest, SharesComputedFullBlocksAndCountsHitsAndMisses) {
  KvCacheManager kv(8, true);
  Sequence a = make_sequence(36);
  EXPECT_TRUE(kv.find_prefix(a).blocks.empty());
  ASSERT_TRUE(kv.allocate(a, 36));
  a.num_computed_tokens = 36;
  kv.cache_computed_blocks(a);
  EXPECT_EQ(a.num_cached_blocks, 2);
  EXPECT_EQ(kv.pool().num_cached(), 2);

  // Same first 32 tokens, different tail: both full blocks are shared.
  Sequence b = make_sequence(34);
  b.token_ids[33] = 90;
  PrefixHit hit = kv.find_prefix(b);
  EXPECT_EQ(hit.blocks, (std::vector<int32_t>{a.block_ids[0], a.block_ids[1]}));
  EXPECT_EQ(hit.num_tokens, 32);
  ASSERT_TRUE(kv.allocate(b, 2, &hit));
  EXPECT_EQ(b.num_computed_tokens, 32);
  EXPECT_EQ(b.block_ids.size(), 3u);
  EXPECT_EQ(kv.pool().ref_count(a.block_ids[0]), 2);

  // A prompt of exactly two blocks reuses only the first: its last token must be recomputed.
  Sequence c = make_sequence(32);
  EXPECT_EQ(kv.find_prefix(c).num_tokens, 16);

  // A different first block misses everything after it.
  Sequence d = make_sequence(40, 1);
  PrefixHit none = kv.find_prefix(d);
  EXPECT_TRUE(none.blocks.empty());
  ASSERT_TRUE(kv.allocate(d, 40, &none));

  PrefixCacheStats stats = kv.stats();
  EXPECT_EQ(stats.hit_blocks, 2u);
  EXPECT_EQ(stats.hit_tokens, 32u);
  EXPECT_EQ(stats.queried_blocks, 4u);  // b: 2, d: 2 (c was only looked up, never admitted)
  EXPECT_EQ(stats.miss_blocks, 2u);
}

TEST(KvCacheManagerTest, FreedPrefixStaysReusableUntilEvicted) {
  KvCacheManager kv(3, true);
  Sequence a = make_sequence(33);
  ASSERT_TRUE(kv.allocate(a, 33));
  a.num_computed_tokens = 33;
  kv.cache_computed_blocks(a);
  std::vector<int32_t> a_blocks = a.block_ids;
  kv.free(a);
  EXPECT_EQ(kv.num_free_blocks(), 3);

  Sequence again = make_sequence(33);
  PrefixHit hit = kv.find_prefix(again);
  EXPECT_EQ(hit.num_tokens, 32);
  // Reviving the two evictable hit blocks leaves one block to allocate: 2 more tokens need just it.
  ASSERT_TRUE(kv.allocate(again, 1, &hit));
  EXPECT_EQ(again.block_ids[0], a_blocks[0]);
  EXPECT_EQ(again.block_ids[1], a_blocks[1]);
  kv.free(again);

  // Another prompt needing all three blocks evicts the cached ones (tail block first).
  Sequence other = make_sequence(48, 500);
  ASSERT_TRUE(kv.allocate(other, 48));
  EXPECT_EQ(kv.stats().evictions, 2u);
  EXPECT_EQ(kv.pool().num_cached(), 0);
}

TEST(KvCacheManagerTest, AllocationCountsRevivedHitBlocksAgainstTheFreePool) {
  KvCacheManager kv(3, true);
  Sequence a = make_sequence(32);
  ASSERT_TRUE(kv.allocate(a, 32));
  a.num_computed_tokens = 32;
  kv.cache_computed_blocks(a);
  kv.free(a);  // 2 evictable + 1 free

  Sequence b = make_sequence(48);
  PrefixHit hit = kv.find_prefix(b);
  ASSERT_EQ(hit.blocks.size(), 2u);
  // 2 hit blocks revived + 2 new blocks for 32 + 20 tokens > 3 blocks: must fail without side effects.
  EXPECT_FALSE(kv.allocate(b, 20, &hit));
  EXPECT_EQ(kv.num_free_blocks(), 3);
  EXPECT_EQ(kv.stats().hit_blocks, 0u);
  EXPECT_TRUE(kv.allocate(b, 16, &hit));
  EXPECT_EQ(kv.num_free_blocks(), 0);
}

}  // namespace
}  // namespace omni::engine
