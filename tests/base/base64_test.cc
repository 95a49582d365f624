#include "base/base64.h"

#include <gtest/gtest.h>

#include <string>

#include "base/error.h"

namespace omni {
namespace {

TEST(Base64, Rfc4648Vectors) {
  const std::pair<std::string, std::string> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(base64_encode(plain), encoded);
    EXPECT_EQ(base64_decode(encoded), plain);
  }
}

TEST(Base64, EveryByteValueRoundTrips) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  const std::string encoded = base64_encode(bytes);
  EXPECT_EQ(encoded.substr(0, 8), "AAECAwQF");
  EXPECT_EQ(encoded.substr(encoded.size() - 4), "/w==");
  EXPECT_EQ(base64_decode(encoded), bytes);
}

TEST(Base64, RejectsMalformedText) {
  for (const char* bad : {"Zm9", "Zm9v!A==", "Z===", "Zg==Zg==", "Zm=v"}) {
    EXPECT_THROW(base64_decode(bad), Error) << bad;
  }
  try {
    base64_decode("Zm9v*mFy");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "base64: invalid character at position 4");
  }
}

}  // namespace
}  // namespace omni
