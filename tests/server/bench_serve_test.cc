// `omnistage bench serve` (the real binary) against the test server.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "server/test_server.h"
#include "support/subprocess.h"

namespace omni::testing {
namespace {

using namespace std::chrono_literals;

class BenchServeTest : public ServerTest {
 protected:
  std::filesystem::path result_path() const {
    return std::filesystem::temp_directory_path() /
           ("omnistage_bench_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".json");
  }
};

TEST_F(BenchServeTest, RandomTokenPromptsWithConcurrencyLimitProduceAResultFile) {
  start({.token_delay = 1ms});
  std::filesystem::path result_file = result_path();
  ProcessResult run = run_process({OMNISTAGE_BINARY,
                                   "bench",
                                   "serve",
                                   "--base-url",
                                   url(""),
                                   "--model",
                                   kModelName,
                                   "--num-prompts",
                                   "20",
                                   "--max-concurrency",
                                   "4",
                                   "--random-input-len",
                                   "16",
                                   "--random-output-len",
                                   "6",
                                   "--random-vocab-size",
                                   "256",
                                   "--ignore-eos",
                                   "--metric-percentiles",
                                   "50,99",
                                   "--result-file",
                                   result_file.string()});
  ASSERT_EQ(run.exit_code, 0) << run.err << run.out;
  EXPECT_NE(run.out.find("Serving Benchmark Result"), std::string::npos);
  std::ifstream in(result_file);
  Json report = Json::parse(in);
  std::filesystem::remove(result_file);

  EXPECT_EQ(report["completed"], 20);
  EXPECT_EQ(report["failed"], 0);
  EXPECT_EQ(report["total_input_tokens"], 20 * 16);
  EXPECT_EQ(report["total_output_tokens"], 20 * 6);
  EXPECT_EQ(report["max_concurrency"], 4);
  EXPECT_EQ(report["max_concurrent_requests"], 4);
  EXPECT_EQ(report["request_rate"], "inf");
  EXPECT_EQ(report["generated_texts"][0], "abcdef");
  EXPECT_EQ(report["itls"][0].size(), 5u);
  for (const char* key : {"mean_ttft_ms", "median_ttft_ms", "p50_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_itl_ms",
                          "mean_e2el_ms", "request_throughput", "output_throughput"}) {
    ASSERT_TRUE(report.contains(key)) << key;
    EXPECT_GT(report[key].get<double>(), 0) << key;
  }
  // TPOT is at least the backend's 1 ms between tokens.
  EXPECT_GE(report["median_tpot_ms"].get<double>(), 1.0);
  EXPECT_LE(report["p50_ttft_ms"].get<double>(), report["p99_ttft_ms"].get<double>());
  // The server's own time per request, from its /metrics around the measured run only.
  const Json& preprocess =
      report["server_time"]["omnistage:http_request_preprocess_seconds{model_name=\"test-model\"}"];
  EXPECT_EQ(preprocess["count"], 20);
  EXPECT_GT(preprocess["mean_ms"].get<double>(), 0);
  EXPECT_EQ(report["server_time"]["omnistage:http_response_postprocess_seconds{model_name=\"test-model\"}"]["count"],
            20);
  EXPECT_NE(run.out.find("Server time per request"), std::string::npos);
  // 20 measured requests plus the initial test request; every one asked for exactly 6 tokens.
  auto submitted = backend_->submitted();
  ASSERT_EQ(submitted.size(), 21u);
  EXPECT_EQ(submitted.back().sampling_params["max_tokens"], 6);
  EXPECT_EQ(submitted.back().sampling_params["ignore_eos"], true);
  EXPECT_EQ(submitted.back().prompt_token_ids.size(), 16u);
}

TEST_F(BenchServeTest, ChatEndpointWithJsonlDatasetAndPoissonRate) {
  start({}, [](server::ApiServerOptions& o) { o.api_keys = {"k"}; });
  std::filesystem::path dataset = result_path().replace_extension(".jsonl");
  {
    std::ofstream out(dataset);
    out << R"({"prompt": "tell me a story", "output_len": 3})"
        << "\n"
        << R"({"messages": [{"role": "user", "content": "hi"}], "output_len": 5})"
        << "\n";
  }
  std::filesystem::path result_file = result_path();
  ProcessResult run = run_process({OMNISTAGE_BINARY, "bench", "serve", "--base-url", url(""), "--endpoint",
                                   "/v1/chat/completions", "--dataset-path", dataset.string(), "--num-prompts", "6",
                                   "--request-rate", "200", "--api-key", "k", "--result-file", result_file.string()});
  ASSERT_EQ(run.exit_code, 0) << run.err << run.out;
  std::ifstream in(result_file);
  Json report = Json::parse(in);
  std::filesystem::remove(result_file);
  std::filesystem::remove(dataset);
  EXPECT_EQ(report["model_id"], kModelName);  // asked from /v1/models
  EXPECT_EQ(report["completed"], 6);
  EXPECT_EQ(report["total_output_tokens"], 3 * (3 + 5));
  EXPECT_EQ(report["output_lens"], Json({3, 5, 3, 5, 3, 5}));
  EXPECT_EQ(report["request_rate"], 200.0);
}

TEST_F(BenchServeTest, AnUnreachableServerFailsWithItsAddress) {
  start();
  std::string dead_url = url("");
  server_->stop();
  ProcessResult run =
      run_process({OMNISTAGE_BINARY, "bench", "serve", "--base-url", dead_url, "--model", "m", "--num-prompts", "2"});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.err.find("127.0.0.1"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace omni::testing
