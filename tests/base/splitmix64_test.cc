#include "base/splitmix64.h"

#include <gtest/gtest.h>

#include <set>

namespace omni {
namespace {

// The reference generator's first outputs for seed 0 (Vigna's splitmix64.c).
TEST(SplitMix64, MatchesTheReferenceStream) {
  SplitMix64 generator(0);
  EXPECT_EQ(generator.next(), 0xe220a8397b1dcdafull);
  EXPECT_EQ(generator.next(), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(generator.next(), 0x06c45d188009454full);
}

TEST(SplitMix64, NextIsTheMixOfTheAdvancedState) {
  SplitMix64 generator(42);
  EXPECT_EQ(generator.next(), splitmix64_mix(42 + kSplitmix64Increment));
  EXPECT_EQ(generator.next(), splitmix64_mix(42 + 2 * kSplitmix64Increment));
}

TEST(SplitMix64, MixSpreadsNearbyInputs) {
  EXPECT_EQ(splitmix64_mix(0), 0u);  // the one fixed point a xor-shift-multiply chain has
  std::set<uint64_t> seen;
  for (uint64_t x = 1; x <= 1000; ++x) {
    uint64_t y = splitmix64_mix(x);
    seen.insert(y);
    // Neighbours differ in about half of their 64 bits.
    int flipped = __builtin_popcountll(y ^ splitmix64_mix(x + 1));
    EXPECT_GT(flipped, 8) << x;
  }
  EXPECT_EQ(seen.size(), 1000u);
}

}  // namespace
}  // namespace omni
