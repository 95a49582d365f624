#include "runtime/device_assignment.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace omni::runtime {
namespace {

using Strings = std::vector<std::string>;

TEST(DeviceAssignmentTest, IndicesMapThroughTheLaunchersVisibleDevices) {
  EXPECT_EQ(map_stage_devices(0, "0,1", std::string("4,5,6")), (Strings{"4", "5"}));
  EXPECT_EQ(map_stage_devices(0, "2", std::string("4,5,6")), (Strings{"6"}));
  // Without CUDA_VISIBLE_DEVICES the indices are physical ids.
  EXPECT_EQ(map_stage_devices(0, "1, 3", std::nullopt), (Strings{"1", "3"}));
  // All outside the visible list: taken as physical ids (a replica spawned with them already).
  EXPECT_EQ(map_stage_devices(0, "5,6", std::string("0,1")), (Strings{"5", "6"}));
  // Partly outside: the mapped subset.
  EXPECT_EQ(map_stage_devices(0, "1,7", std::string("2,3")), (Strings{"3"}));
}

TEST(DeviceAssignmentTest, NonNumericDevicesAreAConfigErrorNamingTheStage) {
  try {
    map_stage_devices(3, "0,cuda:1", std::nullopt);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_STREQ(e.what(), "stage 3: devices entry 'cuda:1' is not a device index (devices: '0,cuda:1')");
  }
}

TEST(DeviceAssignmentTest, ReplicasSplitAPoolOrRepeatATemplate) {
  EXPECT_EQ(split_devices_for_replicas(1, {"0", "1", "2", "3"}, 2, 2), (std::vector<Strings>{{"0", "1"}, {"2", "3"}}));
  EXPECT_EQ(split_devices_for_replicas(1, {"0"}, 3, 1), (std::vector<Strings>{{"0"}, {"1"}, {"2"}}));
  try {
    split_devices_for_replicas(1, {"0", "1", "2"}, 2, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "stage 1: 3 devices for 2 replicas of 2 devices each; need either 2 (template) or 4 (pool)");
  }
}

TEST(DeviceAssignmentTest, ReplicaVisibleDevicesCombinesBoth) {
  auto visible = replica_visible_devices(2, "1,2", 2, 1, std::string("6,7,8"));
  ASSERT_EQ(visible.size(), 2u);
  EXPECT_EQ(visible[0], "7");
  EXPECT_EQ(visible[1], "8");
  auto none = replica_visible_devices(0, "", 2, 1, std::string("0"));
  EXPECT_FALSE(none[0].has_value());
  EXPECT_FALSE(none[1].has_value());
}

TEST(DeviceAssignmentTest, TensorParallelReplicasTakeConsecutiveDevicesInLauncherOrder) {
  // Two replicas of a TP-2 stage over logical devices 0-3 of CUDA_VISIBLE_DEVICES=4,5,6,7: each
  // replica process sees its two GPUs, and its rank r runs on the r-th of them.
  auto visible = replica_visible_devices(0, "0,1,2,3", 2, 2, std::string("4,5,6,7"));
  ASSERT_EQ(visible.size(), 2u);
  EXPECT_EQ(visible[0], "4,5");
  EXPECT_EQ(visible[1], "6,7");
  // Two stages on one GPU, another on the next: each maps on its own.
  EXPECT_EQ(replica_visible_devices(0, "1", 1, 1, std::string("2,3"))[0], "3");
  EXPECT_EQ(replica_visible_devices(1, "1", 1, 1, std::string("2,3"))[0], "3");
  EXPECT_EQ(replica_visible_devices(2, "0", 1, 1, std::string("2,3"))[0], "2");
  try {
    replica_visible_devices(3, "0", 1, 2, std::nullopt);
    FAIL() << "a TP-2 replica got one device";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "stage 3: 1 devices for 1 replicas of 2 devices each; need either 2 (template) or 2 (pool)");
  }
}

}  // namespace
}  // namespace omni::runtime
