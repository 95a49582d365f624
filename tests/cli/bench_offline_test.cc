// `omnistage bench latency` and `bench throughput` end to end on a tiny checkpoint (CPU backend on
// machines without a GPU): the reports count what was run, and bad flags are usage errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "base/json.h"
#include "support/subprocess.h"

namespace omni {
namespace {

namespace fs = std::filesystem;
using testing::run_process;

const fs::path kModel = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen/qwen3_gqa2_tied_bf16_v5";

class BenchOfflineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    json_ = fs::temp_directory_path() / ("omni_bench_offline_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".json");
  }
  void TearDown() override { fs::remove(json_); }
  fs::path json_;
};

TEST_F(BenchOfflineTest, LatencyReportsOnePrefillStepAndTheDecodeStepsPerBatchSize) {
  auto r = run_process({OMNISTAGE_BINARY, "bench", "latency", "--model", kModel.string(), "--device", "cpu",
                        "--input-len", "9", "--output-len", "5", "--batch-size", "1,3", "--num-iters-warmup", "0",
                        "--num-iters", "2", "--output-json", json_.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json report = read_json_file(json_);
  EXPECT_EQ(report["device"], "cpu");
  ASSERT_EQ(report["results"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const Json& row = report["results"][i];
    EXPECT_EQ(row["batch_size"], i == 0 ? 1 : 3);
    // The whole batch's prompts fit one step; the other 4 tokens come from 4 decode steps.
    EXPECT_EQ(row["prefill_steps_per_iter"], 1);
    EXPECT_GT(row["decode_ms_per_step_mean"].get<double>(), 0.0);
    EXPECT_GE(row["decode_ms_per_step_p90"].get<double>(), row["decode_ms_per_step_p50"].get<double>());
    EXPECT_EQ(row["latencies_s"].size(), 2u);
    EXPECT_GT(row["output_tokens_per_s"].get<double>(), 0.0);
  }
  EXPECT_NE(r.out.find("decode_ms/step"), std::string::npos) << r.out;
}

TEST_F(BenchOfflineTest, ThroughputCountsEveryRequestsOutput) {
  auto r = run_process({OMNISTAGE_BINARY, "bench", "throughput", "--model", kModel.string(), "--device", "cpu",
                        "--num-prompts", "7", "--input-len", "6", "--output-len", "4", "--max-num-seqs", "3",
                        "--output-json", json_.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json report = read_json_file(json_);
  EXPECT_EQ(report["num_requests"], 7);
  EXPECT_EQ(report["total_num_tokens"].get<double>(), 7 * 6 + 7 * 4);
  // At most 3 sequences per step: 7 requests need at least 3 rounds of 4 tokens.
  EXPECT_GE(report["num_steps"].get<int>(), 3 * 4);
  EXPECT_GT(report["output_tokens_per_second"].get<double>(), 0.0);
  EXPECT_NE(r.out.find("output tokens/s"), std::string::npos) << r.out;
}

TEST_F(BenchOfflineTest, BadFlagsAreRejectedNamingTheFlag) {
  auto r = run_process(
      {OMNISTAGE_BINARY, "bench", "latency", "--model", kModel.string(), "--device", "cpu", "--batch-size", "1,x"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--batch-size: 'x' is not a positive integer"), std::string::npos) << r.err;
  r = run_process(
      {OMNISTAGE_BINARY, "bench", "latency", "--model", kModel.string(), "--device", "cpu", "--output-len", "1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--output-len >= 2"), std::string::npos) << r.err;
  r = run_process({OMNISTAGE_BINARY, "bench", "throughput", "--model", kModel.string(), "--device", "gpu"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--device: unknown device 'gpu'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace omni
