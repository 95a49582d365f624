#include "base/error.h"

#include <gtest/gtest.h>

namespace omni {
namespace {

TEST(ErrorTest, CodesMapToHttpStatusAndExitCode) {
  EXPECT_EQ(http_status(ErrorCode::kInvalidArgument), 400);
  EXPECT_EQ(http_status(ErrorCode::kInvalidConfig), 400);
  EXPECT_EQ(http_status(ErrorCode::kUnauthorized), 401);
  EXPECT_EQ(http_status(ErrorCode::kNotFound), 404);
  EXPECT_EQ(http_status(ErrorCode::kPayloadTooLarge), 413);
  EXPECT_EQ(http_status(ErrorCode::kInternal), 500);
  EXPECT_EQ(http_status(ErrorCode::kUnsupported), 501);
  EXPECT_EQ(http_status(ErrorCode::kUnavailable), 503);
  EXPECT_EQ(exit_code(ErrorCode::kInvalidArgument), 64);
  EXPECT_EQ(exit_code(ErrorCode::kInvalidConfig), 78);
  EXPECT_EQ(exit_code(ErrorCode::kInternal), 70);
  EXPECT_EQ(error_code_name(ErrorCode::kInvalidArgument), "invalid_argument");
}

TEST(ErrorTest, ThrowErrorFormatsTheMessageAndKeepsTheCode) {
  try {
    throw_error(ErrorCode::kInvalidConfig, "stage {}: field '{}' must be positive", 1, "max_num_seqs");
    FAIL() << "throw_error returned";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "stage 1: field 'max_num_seqs' must be positive");
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_EQ(e.http_status(), 400);
    EXPECT_EQ(e.exit_code(), 78);
  }
}

TEST(ErrorTest, EveryCodeHasADistinctName) {
  std::set<std::string_view> names;
  for (int c = 0; c <= static_cast<int>(ErrorCode::kInternal); ++c) {
    names.insert(error_code_name(static_cast<ErrorCode>(c)));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(ErrorCode::kInternal) + 1);
}

}  // namespace
}  // namespace omni
