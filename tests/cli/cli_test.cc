#include <gtest/gtest.h>

#include "support/subprocess.h"

namespace omni {
namespace {

using testing::run_process;

TEST(CliTest, VersionPrintsVersionCommitAndBackends) {
  auto r = run_process({OMNISTAGE_BINARY, "--version"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("omnistage 0.1.0 (commit ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\nbackends: cpu"), std::string::npos) << r.out;
#ifdef OMNI_TEST_EXPECT_CUDA
  EXPECT_NE(r.out.find("backends: cpu, cuda (sm_90)"), std::string::npos) << r.out;
#endif
}

TEST(CliTest, HelpListsTheGlobalFlags) {
  auto r = run_process({OMNISTAGE_BINARY, "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--log-level"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--version"), std::string::npos) << r.out;
}

TEST(CliTest, UnknownFlagIsAUsageErrorNamingTheFlag) {
  auto r = run_process({OMNISTAGE_BINARY, "--no-such-flag"});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_NE(r.err.find("--no-such-flag"), std::string::npos) << r.err;
}

TEST(CliTest, BadLogLevelFromTheEnvironmentIsRejected) {
  auto r = run_process({OMNISTAGE_BINARY}, {"OMNISTAGE_LOG_LEVEL=shouty"});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_NE(r.err.find("OMNISTAGE_LOG_LEVEL: unknown log level 'shouty'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace omni
