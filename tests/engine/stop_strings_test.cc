#include "engine/stop_strings.h"

#include <gtest/gtest.h>

namespace omni::engine {
namespace {

TEST(StopStringsTest, FindsAStopStringCompletedByTheNewText) {
  std::vector<std::string> stop = {"STOP"};
  // "ST" arrived earlier, "OP!" now: the match spans the boundary.
  auto match = find_stop_string("abc STOP!", 3, stop, false);
  ASSERT_TRUE(match);
  EXPECT_EQ(match->stop_index, 0u);
  EXPECT_EQ(match->truncate_to, 4u);
  auto kept = find_stop_string("abc STOP!", 3, stop, true);
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->truncate_to, 8u) << "include_stop_str_in_output cuts after the stop string";
  auto at_end = find_stop_string("abc STOP", 2, stop, true);
  ASSERT_TRUE(at_end);
  EXPECT_EQ(at_end->truncate_to, std::string_view::npos);
}

TEST(StopStringsTest, IgnoresMatchesThatEndedBeforeTheNewText) {
  std::vector<std::string> stop = {"ab"};
  EXPECT_FALSE(find_stop_string("ab..", 2, stop, false)) << "an old match was already handled";
  EXPECT_FALSE(find_stop_string("ab", 0, stop, false));
  EXPECT_TRUE(find_stop_string("xab", 1, stop, false));
}

TEST(StopStringsTest, TheFirstStopStringInListOrderWins) {
  std::vector<std::string> stop = {"world", "hello"};
  auto match = find_stop_string("hello world", 11, stop, false);
  ASSERT_TRUE(match);
  EXPECT_EQ(match->stop_index, 0u);
  EXPECT_EQ(match->truncate_to, 6u);
}

TEST(StopStringsTest, HoldbackIsTheLongestStopStringMinusOne) {
  EXPECT_EQ(stop_string_holdback(std::vector<std::string>{"a", "abcd", "xy"}, false), 3u);
  EXPECT_EQ(stop_string_holdback(std::vector<std::string>{"abcd"}, true), 0u);
  EXPECT_EQ(stop_string_holdback(std::vector<std::string>{}, false), 0u);
}

}  // namespace
}  // namespace omni::engine
