// base/json_long_strings.h: the same values and the same errors as nlohmann's own parse, for
// documents with long strings in every position the lifting treats differently.
#include "base/json_long_strings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace omni {
namespace {

std::string long_ascii(size_t n, char seed) {
  std::string s(n, 'A');
  for (size_t i = 0; i < n; ++i) s[i] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="[(i * 31 + seed) % 65];
  return s;
}

void expect_same_as_nlohmann(const std::string& text) {
  SCOPED_TRACE(text.substr(0, 80));
  EXPECT_EQ(parse_json_with_long_strings(text), Json::parse(text));
  EXPECT_EQ(parse_ordered_json_with_long_strings(text), OrderedJson::parse(text));
  EXPECT_EQ(parse_ordered_json_with_long_strings(text).dump(), OrderedJson::parse(text).dump());
}

TEST(JsonLongStrings, ValuesEqualNlohmannsInEveryPosition) {
  const std::string a = long_ascii(kLongJsonString, 1), b = long_ascii(70000, 2), c = long_ascii(5000, 3);
  expect_same_as_nlohmann(R"({"ref_audio": "data:audio/wav;base64,)" + a + R"(", "input": "hi"})");
  expect_same_as_nlohmann(R"({"z": [")" + b + R"(", 1, {"url": ")" + c + R"("}], "a": ")" + a + R"("})");
  expect_same_as_nlohmann("[\"" + b + "\" , \"" + b + "\"]");
  expect_same_as_nlohmann("\"" + c + "\"");
  // A long key, a long string with escapes, one with non-ASCII text, one just too short: parsed
  // by nlohmann itself, the same values.
  expect_same_as_nlohmann(R"({")" + c + R"(" : 1, "e": ")" + c + R"(\n\"x\"", "u": ")" + c + "\xc3\xa9" +
                          R"(", "s": ")" + long_ascii(kLongJsonString - 1, 4) + R"("})");
  // A string that spells what a placeholder holds, but for another process.
  expect_same_as_nlohmann(R"({"p": "\u0001long-string-12345:0", "q": ")" + b + R"("})");
}

TEST(JsonLongStrings, ErrorsAreNlohmannsAtTheirPlaceInTheOriginalText) {
  const std::string b = long_ascii(20000, 5);
  for (const std::string& bad : std::vector<std::string>{
           R"({"a": ")" + b + R"(", "b": })", R"({"a": ")" + b + R"(")", R"({"a": ")" + b,
           R"({"a": ")" + b + R"(" "b"})", "[\"" + b + "\", \"\x01\"]"}) {
    std::string want, got;
    try {
      (void)Json::parse(bad);
    } catch (const Json::exception& e) {
      want = e.what();
    }
    try {
      (void)parse_json_with_long_strings(bad);
    } catch (const Json::exception& e) {
      got = e.what();
    }
    EXPECT_FALSE(want.empty());
    EXPECT_EQ(got, want);
  }
}

TEST(JsonLongStrings, ParseJsonUsesIt) {
  const std::string b = long_ascii(100000, 6);
  EXPECT_EQ(parse_json(R"({"x": ")" + b + R"("})", "body")["x"], b);
}

}  // namespace
}  // namespace omni
