#include "engine/block_pool.h"

#include <gtest/gtest.h>

#include <numeric>

#include "engine/block_hash.h"
#include "engine/lru_evictor.h"
#include "model/causal_lm.h"

namespace omni::engine {
namespace {

std::vector<int32_t> block_of(int32_t first) {
  std::vector<int32_t> tokens(model::kKvBlockSize);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

TEST(LruEvictorTest, PopsLeastRecentlyAddedAndSkipsRemoved) {
  LruEvictor lru(8);
  for (int32_t b : {3, 1, 6, 2}) lru.add(b);
  EXPECT_EQ(lru.size(), 4);
  EXPECT_TRUE(lru.remove(1));
  EXPECT_FALSE(lru.remove(1));
  EXPECT_FALSE(lru.contains(1));
  lru.add(1);  // now the most recent
  EXPECT_EQ(lru.pop_lru(), 3);
  EXPECT_EQ(lru.pop_lru(), 6);
  EXPECT_EQ(lru.pop_lru(), 2);
  EXPECT_EQ(lru.pop_lru(), 1);
  EXPECT_EQ(lru.pop_lru(), std::nullopt);
  EXPECT_EQ(lru.size(), 0);
}

TEST(BlockHashTest, DependsOnTokensAndParent) {
  auto a = block_of(0);
  auto b = block_of(0);
  b[15] = 99;
  BlockHash h = hash_block(kRootBlockHash, a);
  EXPECT_EQ(h, hash_block(kRootBlockHash, block_of(0)));
  EXPECT_NE(h, hash_block(kRootBlockHash, b));
  EXPECT_NE(h, hash_block(h, a));

  std::vector<int32_t> tokens(40);
  std::iota(tokens.begin(), tokens.end(), 5);
  std::vector<BlockHash> chain;
  extend_block_hashes(std::span<const int32_t>(tokens).first(20), chain);
  ASSERT_EQ(chain.size(), 1u);
  extend_block_hashes(tokens, chain);
  ASSERT_EQ(chain.size(), 2u);  // 40 tokens = 2 full blocks + 8
  EXPECT_EQ(chain[0], hash_block(kRootBlockHash, std::span<const int32_t>(tokens).first(16)));
  EXPECT_EQ(chain[1], hash_block(chain[0], std::span<const int32_t>(tokens).subspan(16, 16)));
}

TEST(BlockPoolTest, AllocatesEveryBlockOnceThenReportsExhaustion) {
  BlockPool pool(4);
  std::vector<int32_t> got;
  while (auto b = pool.allocate()) got.push_back(*b);
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(pool.num_available(), 0);
  pool.unref(2);
  EXPECT_EQ(pool.num_available(), 1);
  EXPECT_EQ(pool.allocate(), 2);
}

TEST(BlockPoolTest, CachedBlocksSurviveUntilEvictedLeastRecentlyUsedFirst) {
  BlockPool pool(3);
  int32_t a = *pool.allocate();
  int32_t b = *pool.allocate();
  ASSERT_TRUE(pool.cache(a, 111, block_of(0)));
  ASSERT_TRUE(pool.cache(b, 222, block_of(100)));
  EXPECT_FALSE(pool.cache(*pool.allocate(), 111, block_of(0))) << "a hash is cached once";
  pool.unref(a);  // a becomes evictable first, then b
  pool.unref(b);
  EXPECT_EQ(pool.num_available(), 2);
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_EQ(pool.find_cached(111, block_of(0)), a);
  EXPECT_EQ(pool.find_cached(111, block_of(1)), std::nullopt) << "tokens are compared, not only hashes";

  // A hit revives a: it leaves the evictor, so the next allocation must evict b.
  pool.ref(a);
  EXPECT_EQ(pool.ref_count(a), 1);
  EXPECT_EQ(pool.num_available(), 1);
  EXPECT_EQ(pool.allocate(), b);
  EXPECT_EQ(pool.num_evictions(), 1u);
  EXPECT_EQ(pool.find_cached(222, block_of(100)), std::nullopt);
  EXPECT_EQ(pool.find_cached(111, block_of(0)), a);
  EXPECT_EQ(pool.allocate(), std::nullopt);
}

}  // namespace
}  // namespace omni::engine
