// The KV budget of a stage that shares a GPU with other stages (engine::gpu_share_kv_cache_bytes):
// each stage's gpu_memory_utilization is its own share of the device.
#include "engine/kv_cache_sizing.h"

#include <gtest/gtest.h>

#include <string>

#include "base/error.h"

namespace omni::engine {
namespace {

constexpr size_t kGiB = size_t{1} << 30;

tensor::DeviceMemory memory(size_t free_gib, size_t total_gib = 100) { return {free_gib * kGiB, total_gib * kGiB}; }

std::string config_error(const tensor::DeviceMemory& at_start, const tensor::DeviceMemory& now, double share,
                         size_t activations) {
  try {
    gpu_share_kv_cache_bytes(at_start, now, share, activations);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(GpuShareKvCacheBytes, TwoStagesOnOneGpuEachGetTheirShare) {
  // The talker starts first (1 GiB already held by the driver), loads 10 GiB, needs 2 GiB of
  // activations: 30 - 10 - 2.
  EXPECT_EQ(gpu_share_kv_cache_bytes(memory(99), memory(89), 0.3, 2 * kGiB), 18 * kGiB);
  // code2wav starts once the talker holds its 30 GiB: the talker's memory is not taken from its
  // share.
  EXPECT_EQ(gpu_share_kv_cache_bytes(memory(69), memory(64), 0.3, 1 * kGiB), 24 * kGiB);
}

TEST(GpuShareKvCacheBytes, AShareLargerThanWhatWasFreeIsRefused) {
  const std::string message = config_error(memory(40), memory(35), 0.5, 0);
  EXPECT_NE(message.find("gpu_memory_utilization 0.5"), std::string::npos) << message;
  EXPECT_NE(message.find("only 40960 MiB were free"), std::string::npos) << message;
}

TEST(GpuShareKvCacheBytes, NothingLeftForTheKvCacheIsRefused) {
  const std::string message = config_error(memory(99), memory(80), 0.2, 2 * kGiB);
  EXPECT_NE(message.find("nothing is left for the KV cache"), std::string::npos) << message;
  EXPECT_NE(message.find("take 19456 MiB"), std::string::npos) << message;
}

TEST(GpuShareKvCacheBytes, TheShareMustBeAFraction) {
  EXPECT_NE(config_error(memory(99), memory(99), 0.0, 0).find("(0, 1]"), std::string::npos);
  EXPECT_NE(config_error(memory(99), memory(99), 1.5, 0).find("(0, 1]"), std::string::npos);
}

}  // namespace
}  // namespace omni::engine
