#include "base/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace omni {
namespace {

TEST(CodePoints, CountsCharactersNotBytes) {
  EXPECT_EQ(code_points(""), 0u);
  EXPECT_EQ(code_points("hello"), 5u);
  EXPECT_EQ(code_points("h\xC3\xA9llo"), 5u);              // é: 2 bytes
  EXPECT_EQ(code_points("\xE4\xBD\xA0\xE5\xA5\xBD"), 2u);  // 你好: 3 bytes each
  EXPECT_EQ(code_points("\xF0\x9F\x98\x80!"), 2u);         // an emoji (4 bytes) and '!'
}

TEST(CodePoints, CountsEveryByteThatIsNotAContinuation) {
  // A lone continuation byte starts nothing; a truncated lead byte still counts as one.
  EXPECT_EQ(code_points("a\x80"), 1u);
  EXPECT_EQ(code_points("a\xE4\xBD"), 2u);
  EXPECT_EQ(code_points(std::string("a\0b", 3)), 3u);
}

TEST(CodePoints, IsAConstantExpression) { static_assert(code_points("\xC3\xA9t\xC3\xA9") == 3); }

}  // namespace
}  // namespace omni
