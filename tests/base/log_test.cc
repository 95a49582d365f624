#include "base/log.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace omni {
namespace {

TEST(LogTest, ParsesEveryLevelCaseInsensitively) {
  EXPECT_EQ(parse_log_level("DEBUG", "--log-level"), spdlog::level::debug);
  EXPECT_EQ(parse_log_level("warn", "--log-level"), spdlog::level::warn);
  EXPECT_EQ(parse_log_level("Warning", "--log-level"), spdlog::level::warn);
  EXPECT_EQ(parse_log_level("off", "--log-level"), spdlog::level::off);
}

TEST(LogTest, UnknownLevelNamesTheSourceAndTheAllowedValues) {
  try {
    parse_log_level("loud", "OMNISTAGE_LOG_LEVEL");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    std::string message = e.what();
    EXPECT_NE(message.find("OMNISTAGE_LOG_LEVEL"), std::string::npos) << message;
    EXPECT_NE(message.find("'loud'"), std::string::npos) << message;
    EXPECT_NE(message.find("trace, debug, info"), std::string::npos) << message;
  }
}

TEST(LogTest, EnvironmentSetsTheLevelAndTheFileReceivesMessages) {
  auto file = std::filesystem::temp_directory_path() / ("omni_log_test_" + std::to_string(getpid()) + ".log");
  setenv("OMNISTAGE_LOG_LEVEL", "error", 1);
  init_logging("", file.string());
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::err);
  spdlog::warn("hidden warning");
  spdlog::error("visible error 42");
  spdlog::default_logger()->flush();
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("visible error 42"), std::string::npos);
  EXPECT_EQ(text.str().find("hidden warning"), std::string::npos);
  // An explicit level wins over the environment.
  init_logging("debug", "");
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::debug);
  unsetenv("OMNISTAGE_LOG_LEVEL");
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace omni
