// `omnistage generate --tensor-parallel-size N` end to end: the real binary starts N - 1 rank
// processes; its logits and greedy output are those of one rank; sizes the model cannot be cut
// into are refused naming the count; no process or /dev/shm segment outlives the command.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "base/json.h"
#include "cli/generate_fixture.h"
#include "support/subprocess.h"
#include "tensor/npy.h"

namespace omni {
namespace {

namespace fs = std::filesystem;
using testing::run_process;

const fs::path& kModel = testing::kGenerateModel;
using testing::join_ids;

// Communicator segments whose creator (the pid in the name) is gone: leftovers. Segments of live
// processes (tests running in parallel) are not counted.
std::vector<std::string> orphaned_segments() {
  std::vector<std::string> names;
  const std::string prefix = "omnistage_tp_";
  for (const auto& entry : fs::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const pid_t creator = std::stoi(name.substr(prefix.size()));
    if (kill(creator, 0) != 0 && errno == ESRCH) names.push_back(name);
  }
  return names;
}

class GenerateTensorParallelTest : public ::testing::TestWithParam<int> {};

TEST_P(GenerateTensorParallelTest, GreedyOutputAndLogitsEqualOneRank) {
  const Json ref = read_json_file(kModel / "reference.json");
  const auto prompt = ref["prompts"][1].get<std::vector<int32_t>>();
  const auto greedy = ref["greedy_continuations"][1].get<std::vector<int32_t>>();
  const fs::path dir = fs::temp_directory_path() / ("omni_generate_tp_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::vector<std::vector<float>> logits;
  for (int size : {1, GetParam()}) {
    const fs::path npy = dir / ("logits_tp" + std::to_string(size) + ".npy");
    auto r = run_process({OMNISTAGE_BINARY, "generate", "--model", kModel.string(), "--prompt-token-ids",
                          join_ids(prompt), "--max-tokens", "24", "--temperature", "0", "--ignore-eos", "--output",
                          "json", "--dump-logits", npy.string(), "--tensor-parallel-size", std::to_string(size)});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(Json::parse(r.out)["token_ids"].get<std::vector<int32_t>>(), greedy) << "size " << size;
    tensor::Tensor t = tensor::load_npy(npy);
    logits.emplace_back(t.data<float>(), t.data<float>() + t.numel());
    if (size > 1) EXPECT_NE(r.err.find("(" + std::to_string(size) + " tensor-parallel ranks)"), std::string::npos);
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  double err = 0, mag = 0;
  for (size_t i = 0; i < logits[0].size(); ++i) {
    err = std::max(err, std::abs(double(logits[1][i]) - logits[0][i]));
    mag = std::max(mag, std::abs(double(logits[0][i])));
  }
  EXPECT_LE(err / mag, 1e-5);
  EXPECT_EQ(orphaned_segments(), std::vector<std::string>{});
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Sizes, GenerateTensorParallelTest, ::testing::Values(2, 4));

TEST(GenerateTensorParallelErrorsTest, SizesTheModelCannotTakeAreRefused) {
  auto r = run_process({OMNISTAGE_BINARY, "generate", "--model", kModel.string(), "--prompt-token-ids", "1,2",
                        "--tensor-parallel-size", "3"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("tensor_parallel_size 3 does not divide num_attention_heads 4"), std::string::npos) << r.err;
  r = run_process({OMNISTAGE_BINARY, "generate", "--model", kModel.string(), "--prompt-token-ids", "1,2",
                   "--tensor-parallel-size", "0"});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_NE(r.err.find("--tensor-parallel-size must be >= 1, got 0"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace omni
