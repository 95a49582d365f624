// The Qwen3-Omni thinker's text model against Hugging Face transformers on the tiny random-weight
// checkpoint of tests/data/tiny_qwen3_omni (scripts/reference/make_tiny_qwen3_omni.py), loaded from
// both expert layouts: logits at every prompt position within 1e-4 relative error, the greedy
// continuations decoded one token at a time through the paged KV cache, and the same logits when
// the batch carries its (text, hence equal) M-RoPE positions through the multimodal rotation path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "logit_checks.h"
#include "model/model_registry.h"
#include "model/qwen3_omni/thinker.h"
#include "tensor/backend.h"
#include "tensor/npy.h"

namespace omni::model {
namespace {

namespace fs = std::filesystem;

const fs::path kDataDir = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_omni";
constexpr double kMaxRelativeError = 1e-4;

using qwen3_omni::PositionErrors;
using qwen3_omni::relative_error;

class ThinkerReferenceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { load(CausalLmLoadOptions{}); }

  void load(const CausalLmLoadOptions& options) {
    model_ = builtin_model_registry().create_causal_lm(kDataDir / GetParam(), options);
    const Json ref = read_json_file(kDataDir / "reference.json");
    prompts_ = ref.at("prompts").get<std::vector<std::vector<int32_t>>>();
    continuations_ = ref.at("greedy_continuations").get<std::vector<std::vector<int32_t>>>();
    for (const auto& file : ref.at("logits")) logits_.push_back(tensor::load_npy(kDataDir / file.get<std::string>()));
    vocab_ = model_->info().vocab_size;
  }

  // Prompt p's logits at every position, with or without explicit M-RoPE positions.
  std::vector<float> prompt_logits(size_t p, bool with_mrope_positions) {
    const auto& prompt = prompts_[p];
    const int n = static_cast<int>(prompt.size());
    std::vector<int32_t> table(4);
    std::iota(table.begin(), table.end(), 0);
    ForwardBatch batch{prompt, {}, {SequenceSlice{0, n, 0, table, true}}, /*all_logits=*/true};
    batch.positions.resize(n);
    std::iota(batch.positions.begin(), batch.positions.end(), 0);
    if (with_mrope_positions) {
      for (int stream = 0; stream < 3; ++stream) {
        batch.mrope_positions.insert(batch.mrope_positions.end(), batch.positions.begin(), batch.positions.end());
      }
    }
    std::vector<float> logits;
    model_->forward(batch, logits);
    return logits;
  }

  void expect_reference_logits(size_t p, const std::vector<float>& logits) {
    PositionErrors errors = PositionErrors::float32(kMaxRelativeError);
    add_reference_errors(p, logits, errors);
  }
  void add_reference_errors(size_t p, const std::vector<float>& logits, PositionErrors& errors) {
    const int n = static_cast<int>(prompts_[p].size());
    ASSERT_EQ(logits.size(), static_cast<size_t>(n) * vocab_);
    errors.add_prompt(qwen3_omni::position_errors(logits.data(), logits_[p].data<float>(), n, vocab_),
                      qwen3_omni::load_bfloat16_reference(kDataDir, "_" + std::to_string(p)),
                      "prompt " + std::to_string(p));
  }

  std::unique_ptr<CausalLm> model_;
  std::vector<std::vector<int32_t>> prompts_, continuations_;
  std::vector<tensor::Tensor> logits_;
  int vocab_ = 0;
};

TEST_P(ThinkerReferenceTest, PromptLogitsAndGreedyContinuationsMatchTransformers) {
  ASSERT_EQ(vocab_, logits_[0].dim(1));
  for (size_t p = 0; p < prompts_.size(); ++p) {
    SCOPED_TRACE("prompt " + std::to_string(p));
    model_->init_kv_cache(8);
    const std::vector<float> logits = prompt_logits(p, false);
    expect_reference_logits(p, logits);
    const int n = static_cast<int>(prompts_[p].size());
    std::vector<int32_t> table(8);
    std::iota(table.begin(), table.end(), 0);
    const float* last = &logits[(n - 1) * vocab_];
    int32_t next = static_cast<int32_t>(std::max_element(last, last + vocab_) - last);
    std::vector<int32_t> generated;
    std::vector<float> step;
    const int new_tokens = static_cast<int>(continuations_[p].size());
    for (int i = 0; i < new_tokens; ++i) {
      generated.push_back(next);
      if (i + 1 == new_tokens) break;
      // Text only: the rope delta is 0, so decode position = prompt max + 1 + step = n + i.
      model_->forward(ForwardBatch{{next}, {n + i}, {SequenceSlice{0, 1, n + i, table, true}}, false}, step);
      ASSERT_EQ(step.size(), static_cast<size_t>(vocab_));
      next = static_cast<int32_t>(std::max_element(step.begin(), step.end()) - step.begin());
    }
    EXPECT_EQ(generated, continuations_[p]);
  }
}

TEST_P(ThinkerReferenceTest, EqualMropeStreamsThroughTheMultimodalRotationGiveTheSameLogits) {
  for (size_t p = 0; p < prompts_.size(); ++p) {
    model_->init_kv_cache(8);
    expect_reference_logits(p, prompt_logits(p, true));
  }
}

// Distinct streams do reach the rotation: height positions that grow twice as fast as the temporal
// ones change the attention, hence the logits past the first position.
TEST_P(ThinkerReferenceTest, DistinctMropeStreamsRotateByTheirOwnPositions) {
  const size_t p = 2;  // the 37-token prompt
  const int n = static_cast<int>(prompts_[p].size());
  model_->init_kv_cache(8);
  ForwardBatch batch{prompts_[p], {}, {SequenceSlice{0, n, 0, {0, 1, 2, 3}, true}}, /*all_logits=*/true};
  for (int t = 0; t < n; ++t) batch.positions.push_back(t);
  for (int stream = 0; stream < 3; ++stream) {
    for (int t = 0; t < n; ++t) batch.mrope_positions.push_back(static_cast<float>(stream == 1 ? 2 * t : t));
  }
  std::vector<float> logits;
  model_->forward(batch, logits);
  ASSERT_EQ(logits.size(), static_cast<size_t>(n) * vocab_);
  EXPECT_LE(relative_error(&logits[0], logits_[p].data<float>(), vocab_), kMaxRelativeError);
  double largest = 0.0;
  for (int t = 1; t < n; ++t) {
    largest = std::max(largest, relative_error(&logits[t * vocab_], logits_[p].data<float>() + t * vocab_, vocab_));
  }
  EXPECT_GT(largest, 1e-2);
  batch.mrope_positions.pop_back();
  try {
    model_->forward(batch, logits);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("110 mrope_positions for 37 tokens (3 per token)"), std::string::npos)
        << e.what();
  }
}

// The same model on a CUDA device in float32: the MoE layers entirely on the device (routing,
// grouping by expert, the grouped products and the combine; model/moe_mlp.h).
TEST_P(ThinkerReferenceTest, Float32OnCudaMatchesTransformers) {
  if (!qwen3_omni::cuda_visible()) GTEST_SKIP() << "no CUDA backend or device";
  load(CausalLmLoadOptions{.device = tensor::Device::cuda(0), .dtype = tensor::DType::kF32});
  for (size_t p = 0; p < prompts_.size(); ++p) {
    model_->init_kv_cache(8);
    expect_reference_logits(p, prompt_logits(p, false));
    model_->init_kv_cache(8);
    expect_reference_logits(p, prompt_logits(p, true));
  }
}

// And in bfloat16 (weights, activations and KV cache): as close to the references as transformers'
// own bfloat16 run, or within 2e-2, away from routing near-ties (logit_checks.h).
TEST_P(ThinkerReferenceTest, Bfloat16OnCudaStaysWithinTransformersBfloat16Error) {
  if (!qwen3_omni::cuda_visible()) GTEST_SKIP() << "no CUDA backend or device";
  load(CausalLmLoadOptions{.device = tensor::Device::cuda(0), .dtype = tensor::DType::kBF16});
  PositionErrors errors = PositionErrors::bfloat16();
  for (size_t p = 0; p < prompts_.size(); ++p) {
    model_->init_kv_cache(8);
    add_reference_errors(p, prompt_logits(p, false), errors);
  }
  errors.check();
}

TEST_P(ThinkerReferenceTest, StopsAtImEnd) {
  const Json config = read_json_file(kDataDir / GetParam() / "config.json");
  const TextModelConfig text = qwen3_omni::parse_thinker_text_config(config, "config.json");
  EXPECT_EQ(text.moe.num_experts, 8);
  EXPECT_EQ(text.moe.num_experts_per_tok, 2);
  EXPECT_TRUE(text.rope.mrope_interleaved);
  const std::vector<int32_t>& eos = model_->info().eos_token_ids;
  EXPECT_NE(std::find(eos.begin(), eos.end(), config.at("im_end_token_id").get<int32_t>()), eos.end());
}

INSTANTIATE_TEST_SUITE_P(TinyQwen3Omni, ThinkerReferenceTest, ::testing::Values("per_expert", "fused"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace omni::model
