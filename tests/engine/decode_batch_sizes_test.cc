#include "engine/decode_batch_sizes.h"

#include <gtest/gtest.h>

namespace omni::engine {
namespace {

TEST(DecodeBatchSizesTest, FollowVllmCaptureSizesUpToTheFirstThatHoldsMaxNumSeqs) {
  EXPECT_EQ(decode_batch_sizes(1), (std::vector<int>{1}));
  EXPECT_EQ(decode_batch_sizes(3), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(decode_batch_sizes(8), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(decode_batch_sizes(20), (std::vector<int>{1, 2, 4, 8, 16, 24}));
  const std::vector<int> sizes = decode_batch_sizes(256);
  ASSERT_EQ(sizes.size(), 35u);  // 1, 2, 4 and 8, 16, ..., 256
  EXPECT_EQ(sizes[3], 8);
  EXPECT_EQ(sizes[33], 248);
  EXPECT_EQ(sizes.back(), 256);
  const std::vector<int> larger = decode_batch_sizes(300);
  EXPECT_EQ(std::vector<int>(larger.end() - 3, larger.end()), (std::vector<int>{272, 288, 304}));
}

TEST(DecodeBatchSizesTest, StopAtTheCapAndAreEmptyWithoutSequences) {
  EXPECT_EQ(decode_batch_sizes(100000).back(), kMaxDecodeBatchSize);
  EXPECT_EQ(decode_batch_sizes(kMaxDecodeBatchSize).back(), kMaxDecodeBatchSize);
  EXPECT_TRUE(decode_batch_sizes(0).empty());
}

}  // namespace
}  // namespace omni::engine
