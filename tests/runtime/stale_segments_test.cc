#include "runtime/stale_segments.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/temp_dir.h"

namespace omni::testing {
namespace {

namespace fs = std::filesystem;

TEST(StaleSegments, OwnersAreReadFromBothNameForms) {
  EXPECT_EQ(runtime::segment_owner("omnistage_1234x00ab_req-1_0_0@1"), 1234);
  EXPECT_EQ(runtime::segment_owner("omnistage_tp_77_0"), 77);
  EXPECT_EQ(runtime::segment_owner("omnistage_x00ab_req"), std::nullopt) << "no pid";
  EXPECT_EQ(runtime::segment_owner("omnistage_1234"), std::nullopt) << "no separator after the pid";
  EXPECT_EQ(runtime::segment_owner("omnistage_0x1"), std::nullopt) << "pid 0 is no process";
  EXPECT_EQ(runtime::segment_owner("other_1234x00"), std::nullopt) << "not omnistage's";
  EXPECT_EQ(runtime::segment_owner("omnistage_tp_x_0"), std::nullopt);
}

// A private directory stands in for /dev/shm, so no other process's sweep can interfere.
TEST(StaleSegments, OnlyEntriesOfDeadOwnersAreRemoved) {
  TempDir dir;
  const std::string self = std::to_string(getpid());
  const std::vector<std::string> dead = {"omnistage_999999999x00_req-1_0_0@1", "omnistage_tp_999999998_0"};
  const std::vector<std::string> kept = {"omnistage_" + self + "x00live_req-1", "omnistage_tp_" + self + "_1",
                                         "omnistage_unattributable", "someone_else_999999999x00"};
  for (const auto& names : {dead, kept}) {
    for (const std::string& name : names) std::ofstream(dir.path() / name) << "x";
  }
  EXPECT_EQ(runtime::sweep_stale_segments(dir.path()), dead.size());
  for (const std::string& name : dead) EXPECT_FALSE(fs::exists(dir.path() / name)) << name;
  for (const std::string& name : kept) EXPECT_TRUE(fs::exists(dir.path() / name)) << name;
  EXPECT_EQ(runtime::sweep_stale_segments(dir.path()), 0u) << "a second sweep finds nothing";
  EXPECT_EQ(runtime::sweep_stale_segments(dir.path() / "missing"), 0u) << "a missing directory is no error";
}

}  // namespace
}  // namespace omni::testing
