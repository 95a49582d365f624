// Tensor parallelism on the CPU backend with real rank processes (`omnistage tp-rank`): on the
// tiny reference checkpoints TP 2, 3 and 4 give the logits of TP 1 within float32 rounding and
// the same greedy continuations as Hugging Face transformers; a killed rank fails the model with
// an error naming it; nothing is left in /dev/shm.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "runtime/tensor_parallel_model.h"

namespace omni::runtime {
namespace {

namespace fs = std::filesystem;

const fs::path kDataDir = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen";

struct TpCase {
  std::string model;
  int size;
};

std::ostream& operator<<(std::ostream& os, const TpCase& c) { return os << c.model << "_tp" << c.size; }

std::unique_ptr<model::CausalLm> load(const std::string& name, int size) {
  return load_tensor_parallel_lm(kDataDir / name,
                                 {.size = size, .device = tensor::Device::cpu(), .program = OMNISTAGE_BINARY});
}

// Logits of every prompt position, then the greedy continuation decoded one token at a time.
struct ModelRun {
  std::vector<float> prompt_logits;
  std::vector<int32_t> greedy;
};

ModelRun run_model(model::CausalLm& lm, const std::vector<int32_t>& prompt, int new_tokens) {
  const int n = static_cast<int>(prompt.size());
  const int vocab = lm.info().vocab_size;
  lm.init_kv_cache(8);
  // Blocks in reverse so the table is not the identity.
  std::vector<int32_t> table(8);
  std::iota(table.rbegin(), table.rend(), 0);
  model::ForwardBatch prefill{prompt, {}, {{0, n, 0, table, true}}, /*all_logits=*/true};
  prefill.positions.resize(n);
  std::iota(prefill.positions.begin(), prefill.positions.end(), 0);
  ModelRun r;
  lm.forward(prefill, r.prompt_logits);
  const float* last = &r.prompt_logits[static_cast<size_t>(n - 1) * vocab];
  int32_t next = static_cast<int32_t>(std::max_element(last, last + vocab) - last);
  std::vector<float> logits;
  for (int i = 0; i < new_tokens; ++i) {
    r.greedy.push_back(next);
    if (i + 1 == new_tokens) break;
    model::ForwardBatch step{{next}, {n + i}, {{0, 1, n + i, table, true}}};
    lm.forward(step, logits);
    next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  return r;
}

std::vector<std::string> shm_leftovers() {
  std::vector<std::string> names;
  const std::string prefix = "omnistage_tp_" + std::to_string(getpid()) + "_";
  for (const auto& entry : fs::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  return names;
}

class TensorParallelTest : public ::testing::TestWithParam<TpCase> {};

TEST_P(TensorParallelTest, LogitsMatchOneRankAndGreedyMatchesTransformers) {
  const TpCase& c = GetParam();
  const Json ref = read_json_file(kDataDir / c.model / "reference.json");
  const auto prompts = ref.at("prompts").get<std::vector<std::vector<int32_t>>>();
  const auto greedy = ref.at("greedy_continuations").get<std::vector<std::vector<int32_t>>>();
  auto single = load(c.model, 1);
  auto split = load(c.model, c.size);
  const int vocab = single->info().vocab_size;
  ASSERT_EQ(split->info().vocab_size, vocab);
  // Each rank holds its KV heads only: a share of them, or one replicated head.
  const Json config = read_json_file(kDataDir / c.model / "config.json");
  const int kv_heads = config.at("num_key_value_heads").get<int>();
  EXPECT_EQ(split->kv_bytes_per_block() * kv_heads, single->kv_bytes_per_block() * std::max(1, kv_heads / c.size));
  for (size_t p = 0; p < prompts.size(); ++p) {
    SCOPED_TRACE("prompt " + std::to_string(p));
    const int new_tokens = static_cast<int>(greedy[p].size());
    const ModelRun want = run_model(*single, prompts[p], new_tokens);
    const ModelRun got = run_model(*split, prompts[p], new_tokens);
    ASSERT_EQ(got.prompt_logits.size(), want.prompt_logits.size());
    for (size_t row = 0; row < prompts[p].size(); ++row) {
      double err = 0, mag = 0;
      for (int v = 0; v < vocab; ++v) {
        err = std::max(err, std::abs(double(got.prompt_logits[row * vocab + v]) - want.prompt_logits[row * vocab + v]));
        mag = std::max(mag, std::abs(double(want.prompt_logits[row * vocab + v])));
      }
      // Float32 rounding of sums taken in another order: far below the 2.9e-3 top-2 margins.
      EXPECT_LE(err / mag, 1e-5) << "position " << row;
    }
    EXPECT_EQ(got.greedy, greedy[p]);
    EXPECT_EQ(want.greedy, greedy[p]);
  }
  split.reset();
  EXPECT_EQ(shm_leftovers(), std::vector<std::string>{});
}

// Every variant whose heads divide: KV heads split (gqa), replicated (mqa; gqa2 at TP 4), tied
// and untied heads, qkv biases, sliding windows, a sharded checkpoint, and a vocabulary that does
// not divide (256 over 3 ranks: the last shard is padded).
INSTANTIATE_TEST_SUITE_P(TinyQwen, TensorParallelTest,
                         ::testing::Values(TpCase{"qwen2_gqa2_untied_bf16_v4_sliding", 2},
                                           TpCase{"qwen2_gqa2_untied_bf16_v4_sliding", 4},
                                           TpCase{"qwen2_gqa3_untied_f32_v5", 2}, TpCase{"qwen2_mqa_tied_f32_v5", 3},
                                           TpCase{"qwen3_gqa2_tied_bf16_v5", 2}, TpCase{"qwen3_gqa2_tied_bf16_v5", 4},
                                           TpCase{"qwen3_gqa3_tied_f32_v4_sharded", 2},
                                           TpCase{"qwen3_mqa_untied_bf16_v5_sliding", 4}),
                         [](const auto& info) {
                           std::ostringstream os;
                           os << info.param;
                           return os.str();
                         });

// The children of this process that run `omnistage tp-rank`.
std::vector<pid_t> rank_processes() {
  std::vector<pid_t> pids;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (!std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != getpid()) continue;
    std::ifstream cmdline(entry.path() / "cmdline");
    std::string args((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    if (args.find("tp-rank") != std::string::npos) pids.push_back(std::stoi(name));
  }
  return pids;
}

TEST(TensorParallelFailureTest, KilledRankFailsTheModelNamingIt) {
  auto lm = load("qwen3_gqa2_tied_bf16_v5", 4);
  EXPECT_EQ(shm_leftovers(), std::vector<std::string>{});  // unlinked once every rank attached
  const std::vector<pid_t> ranks = rank_processes();
  ASSERT_EQ(ranks.size(), 3u);
  const std::vector<int32_t> prompt = {1, 2, 3};
  run_model(*lm, prompt, 2);
  ASSERT_EQ(kill(ranks[1], SIGKILL), 0);
  try {
    run_model(*lm, prompt, 2);
    FAIL() << "a forward pass with a dead rank succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("was killed by signal 9 (SIGKILL)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tensor-parallel rank"), std::string::npos) << e.what();
  }
  // The group stays failed; it does not hang.
  EXPECT_THROW(lm->init_kv_cache(4), Error);
  lm.reset();
  // Every rank is gone (the survivors were killed and reaped).
  EXPECT_EQ(rank_processes(), std::vector<pid_t>{});
  EXPECT_EQ(shm_leftovers(), std::vector<std::string>{});
}

TEST(TensorParallelFailureTest, ModelThatCannotBeSplitIsRejectedNamingTheCounts) {
  try {
    load("qwen3_gqa3_tied_f32_v4_sharded", 4);  // 6 heads
    FAIL() << "6 heads over 4 ranks loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_NE(std::string(e.what()).find("tensor_parallel_size 4 does not divide num_attention_heads 6"),
              std::string::npos)
        << e.what();
  }
  // The ranks that had started were stopped.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(rank_processes(), std::vector<pid_t>{});
  EXPECT_EQ(shm_leftovers(), std::vector<std::string>{});
}

}  // namespace
}  // namespace omni::runtime
