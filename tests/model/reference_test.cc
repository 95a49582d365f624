// Our Qwen3/Qwen2 implementation against Hugging Face transformers on the tiny random-weight
// checkpoints of tests/data/tiny_qwen (made by scripts/reference/make_tiny_qwen.py): logits at
// every prompt position within 1e-4 relative error, identical 24-token greedy continuations
// (decoded one token at a time through the paged KV cache), and the same results when the
// prompts share one batch and are prefilled in chunks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "model/model_registry.h"
#include "tensor/npy.h"

namespace omni::model {
namespace {

namespace fs = std::filesystem;

const fs::path kDataDir = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen";

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kDataDir)) {
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

struct Reference {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> continuations;
  std::vector<tensor::Tensor> logits;  // [prompt_len, vocab] each
};

Reference read_reference(const fs::path& dir) {
  const Json j = read_json_file(dir / "reference.json");
  Reference r;
  r.prompts = j.at("prompts").get<std::vector<std::vector<int32_t>>>();
  r.continuations = j.at("greedy_continuations").get<std::vector<std::vector<int32_t>>>();
  for (const auto& file : j.at("logits")) r.logits.push_back(tensor::load_npy(dir / file.get<std::string>()));
  return r;
}

// max |got - want| / max |want| over one row of `vocab` logits.
double relative_error(const float* got, const float* want, int vocab) {
  double err = 0.0, mag = 0.0;
  for (int i = 0; i < vocab; ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    mag = std::max(mag, std::abs(static_cast<double>(want[i])));
  }
  return err / mag;
}

constexpr double kMaxRelativeError = 1e-4;

class ReferenceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = kDataDir / GetParam();
    model_ = builtin_model_registry().create_causal_lm(dir_);
    ref_ = read_reference(dir_);
    vocab_ = model_->info().vocab_size;
  }

  // Blocks for `tokens` tokens taken from the end of a shuffled pool, so tables are scattered.
  std::vector<int32_t> take_blocks(int tokens) {
    std::vector<int32_t> table;
    for (int i = 0; i < (tokens + kKvBlockSize - 1) / kKvBlockSize; ++i) {
      table.push_back(free_.back());
      free_.pop_back();
    }
    return table;
  }

  void init_cache(int blocks) {
    model_->init_kv_cache(blocks);
    free_.resize(blocks);
    std::iota(free_.begin(), free_.end(), 0);
    std::shuffle(free_.begin(), free_.end(), std::mt19937(7));
  }

  fs::path dir_;
  std::unique_ptr<CausalLm> model_;
  Reference ref_;
  int vocab_ = 0;
  std::vector<int32_t> free_;
};

TEST_P(ReferenceTest, PromptLogitsAndGreedyContinuationMatchTransformers) {
  ASSERT_EQ(vocab_, ref_.logits[0].dim(1));
  for (size_t p = 0; p < ref_.prompts.size(); ++p) {
    SCOPED_TRACE("prompt " + std::to_string(p));
    const auto& prompt = ref_.prompts[p];
    const int n = static_cast<int>(prompt.size());
    const int new_tokens = static_cast<int>(ref_.continuations[p].size());
    init_cache(16);
    SequenceSlice seq{0, n, 0, take_blocks(n + new_tokens), true};
    ForwardBatch prefill{prompt, {}, {seq}, /*all_logits=*/true};
    prefill.positions.resize(n);
    std::iota(prefill.positions.begin(), prefill.positions.end(), 0);
    std::vector<float> logits;
    model_->forward(prefill, logits);
    ASSERT_EQ(logits.size(), static_cast<size_t>(n) * vocab_);
    for (int t = 0; t < n; ++t) {
      EXPECT_LE(relative_error(&logits[t * vocab_], ref_.logits[p].data<float>() + t * vocab_, vocab_),
                kMaxRelativeError)
          << "position " << t;
    }

    std::vector<int32_t> generated;
    const float* last = &logits[(n - 1) * vocab_];
    int32_t next = static_cast<int32_t>(std::max_element(last, last + vocab_) - last);
    for (int step = 0; step < new_tokens; ++step) {
      generated.push_back(next);
      if (step + 1 == new_tokens) break;
      SequenceSlice decode{0, 1, n + step, seq.block_table, true};
      model_->forward(ForwardBatch{{next}, {n + step}, {decode}, false}, logits);
      ASSERT_EQ(logits.size(), static_cast<size_t>(vocab_));
      next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    EXPECT_EQ(generated, ref_.continuations[p]);
  }
}

TEST_P(ReferenceTest, ChunkedBatchedPrefillGivesTheSameLastLogits) {
  init_cache(32);
  // Chunk 1: the first half of every prompt, all in one batch, no logits wanted.
  std::vector<SequenceSlice> seqs;
  ForwardBatch first;
  for (const auto& prompt : ref_.prompts) {
    const int n = static_cast<int>(prompt.size());
    const int half = n / 2;
    seqs.push_back({static_cast<int32_t>(first.token_ids.size()), half, 0, take_blocks(n), false});
    for (int t = 0; t < half; ++t) {
      first.token_ids.push_back(prompt[t]);
      first.positions.push_back(t);
    }
  }
  first.seqs = seqs;
  std::vector<float> logits;
  model_->forward(first, logits);
  EXPECT_TRUE(logits.empty());
  // Chunk 2: the rest, after the cached halves; one logits row per sequence.
  ForwardBatch second;
  for (size_t s = 0; s < ref_.prompts.size(); ++s) {
    const auto& prompt = ref_.prompts[s];
    const int n = static_cast<int>(prompt.size());
    const int half = n / 2;
    seqs[s].context_len = half;
    seqs[s].query_len = n - half;
    seqs[s].query_start = static_cast<int32_t>(second.token_ids.size());
    seqs[s].wants_logits = true;
    for (int t = half; t < n; ++t) {
      second.token_ids.push_back(prompt[t]);
      second.positions.push_back(t);
    }
  }
  second.seqs = seqs;
  model_->forward(second, logits);
  ASSERT_EQ(logits.size(), ref_.prompts.size() * vocab_);
  for (size_t s = 0; s < ref_.prompts.size(); ++s) {
    const int n = static_cast<int>(ref_.prompts[s].size());
    EXPECT_LE(relative_error(&logits[s * vocab_], ref_.logits[s].data<float>() + (n - 1) * vocab_, vocab_),
              kMaxRelativeError)
        << "prompt " << s;
  }
}

TEST_P(ReferenceTest, EosIdsComeFromTheGenerationConfig) {
  const Json ref = read_json_file(dir_ / "reference.json");
  EXPECT_EQ(model_->info().eos_token_ids, ref.at("eos_token_ids").get<std::vector<int32_t>>());
}

TEST_P(ReferenceTest, TokenIdsOutsideTheVocabularyAreRejected) {
  init_cache(1);
  SequenceSlice seq{0, 1, 0, {0}, true};
  std::vector<float> logits;
  try {
    model_->forward(ForwardBatch{{vocab_}, {0}, {seq}, false}, logits);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("token id " + std::to_string(vocab_)), std::string::npos) << e.what();
  }
}

TEST(ReferenceDataTest, CoversEveryVariantTheReferenceScriptMakes) { EXPECT_EQ(model_names().size(), 7u); }

INSTANTIATE_TEST_SUITE_P(TinyQwen, ReferenceTest, ::testing::ValuesIn(model_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace omni::model
