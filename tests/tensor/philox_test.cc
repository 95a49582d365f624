// Philox4x32-10 against the known-answer vectors published with Random123 (kat_vectors), and the
// uniforms sample() draws from it.
#include "tensor/philox.h"

#include <gtest/gtest.h>

namespace omni::tensor {
namespace {

void expect_block(Philox4x32 counter, uint32_t key0, uint32_t key1, Philox4x32 want) {
  const Philox4x32 got = philox4x32_10(counter, key0, key1);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], want.v[i]) << "word " << i;
}

TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  expect_block({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}});
  expect_block({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
               {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}});
  expect_block({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
               {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
}

TEST(PhiloxTest, UniformsLieInTheUnitIntervalAndDependOnSeedAndStep) {
  double sum = 0.0;
  for (uint64_t step = 0; step < 10000; ++step) {
    const float u = philox_uniform(42, step);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.01);
  EXPECT_EQ(philox_uniform(7, 3), philox_uniform(7, 3));
  EXPECT_NE(philox_uniform(7, 3), philox_uniform(8, 3));
  EXPECT_NE(philox_uniform(7, 3), philox_uniform(7, 4));
  EXPECT_NE(philox_uniform(7, 3), philox_uniform(7, 3 + (uint64_t{1} << 32)));
}

}  // namespace
}  // namespace omni::tensor
