#include "tensor/free_block_cache.h"

#include <gtest/gtest.h>

namespace omni::tensor {
namespace {

// Distinct addresses standing in for device blocks; the cache never dereferences them.
char blocks[8];
void* address(int i) { return &blocks[i]; }

TEST(FreeBlockCacheTest, TakesTheSmallestBlockThatFits) {
  FreeBlockCache cache;
  cache.put(address(1), 8192);
  cache.put(address(2), 4096);
  cache.put(address(3), 6144);
  EXPECT_EQ(cache.bytes(), 18432u);
  const auto block = cache.take(5000);
  ASSERT_TRUE(block.has_value());
  EXPECT_EQ(block->ptr, address(3));
  EXPECT_EQ(block->size, 6144u);
  EXPECT_EQ(cache.bytes(), 12288u);
  EXPECT_EQ(cache.take(4096)->ptr, address(2));
  EXPECT_EQ(cache.take(4096)->ptr, address(1));  // 8192 is at most twice 4096
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_FALSE(cache.take(1).has_value());
}

TEST(FreeBlockCacheTest, NeverHandsOutABlockMoreThanTwiceTheRequest) {
  FreeBlockCache cache;
  cache.put(address(1), 8194);
  EXPECT_FALSE(cache.take(4096).has_value());
  EXPECT_FALSE(cache.take(8195).has_value());  // too small
  EXPECT_EQ(cache.bytes(), 8194u);
  EXPECT_EQ(cache.take(4097)->ptr, address(1));
}

TEST(FreeBlockCacheTest, ReusesTheLastFreedOfEqualBlocksFirst) {
  FreeBlockCache cache;
  cache.put(address(1), 4096);
  cache.put(address(2), 4096);
  cache.put(address(3), 4096);
  EXPECT_EQ(cache.take(4096)->ptr, address(3));
  EXPECT_EQ(cache.take(4096)->ptr, address(2));
  cache.put(address(4), 4096);
  EXPECT_EQ(cache.take(4096)->ptr, address(4));
}

TEST(FreeBlockCacheTest, TakeAllEmptiesTheCache) {
  FreeBlockCache cache;
  cache.put(address(1), 512);
  cache.put(address(2), 2 << 20);
  const auto all = cache.take_all();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].ptr, address(1));
  EXPECT_EQ(all[1].size, size_t{2} << 20);
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_FALSE(cache.take(512).has_value());
}

}  // namespace
}  // namespace omni::tensor
