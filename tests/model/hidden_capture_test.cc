// ForwardBatch::capture (model/causal_lm.h) on a tiny Qwen3 of tests/data/tiny_qwen, whose logits
// match transformers (reference_test.cc): the captured input embeddings are the embedding table's
// rows, the output of the last layer through the final norm and the output head gives the logits
// forward() returns, and a capture is the same whether the prompt is prefilled at once or in
// chunks. These are what a downstream stage (the Qwen3-Omni talker) reads of the thinker.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "model/model_registry.h"
#include "model/safetensors.h"

namespace omni::model {
namespace {

const std::filesystem::path kDir =
    std::filesystem::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen/qwen3_mha_untied_f32_v4";
constexpr int kHidden = 48, kVocab = 320, kLayers = 2;
const std::vector<int32_t> kPrompt = {5, 77, 301, 12, 40, 199, 3};

// One sequence's rows [begin, begin + n) of kPrompt, after `begin` earlier rows in the cache.
ForwardBatch slice(int begin, int n, ForwardBatch::HiddenCapture* capture) {
  ForwardBatch batch;
  batch.all_logits = true;
  for (int i = 0; i < n; ++i) {
    batch.token_ids.push_back(kPrompt[begin + i]);
    batch.positions.push_back(begin + i);
  }
  batch.seqs.push_back({0, n, begin, {0}, true});
  batch.capture = capture;
  return batch;
}

TEST(HiddenCaptureTest, EmbeddingsAndTheLastLayerAreWhatTheLogitsComeFrom) {
  auto model = builtin_model_registry().create_causal_lm(kDir);
  model->init_kv_cache(2);
  ForwardBatch::HiddenCapture capture{kLayers, {}, {}};
  std::vector<float> logits;
  const int n = static_cast<int>(kPrompt.size());
  model->forward(slice(0, n, &capture), logits);
  ASSERT_EQ(capture.embeddings.size(), static_cast<size_t>(n * kHidden));
  ASSERT_EQ(capture.hidden.size(), static_cast<size_t>(n * kHidden));
  ASSERT_EQ(logits.size(), static_cast<size_t>(n * kVocab));

  const Checkpoint ckpt = Checkpoint::open(kDir);
  const tensor::Tensor embed = ckpt.load_f32("model.embed_tokens.weight", {kVocab, kHidden});
  const tensor::Tensor norm = ckpt.load_f32("model.norm.weight", {kHidden});
  const tensor::Tensor head = ckpt.load_f32("lm_head.weight", {kVocab, kHidden});
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < kHidden; ++i) {
      ASSERT_EQ(capture.embeddings[t * kHidden + i], embed.data<float>()[kPrompt[t] * kHidden + i]) << t << "," << i;
    }
    // RMSNorm (eps 1e-5) and the head, in float64, against the logits.
    const float* hrow = capture.hidden.data() + t * kHidden;
    double ms = 0.0;
    for (int i = 0; i < kHidden; ++i) ms += double{hrow[i]} * hrow[i];
    const double inv = 1.0 / std::sqrt(ms / kHidden + 1e-5);
    double worst = 0.0, peak = 0.0;
    for (int v = 0; v < kVocab; ++v) {
      double s = 0.0;
      for (int i = 0; i < kHidden; ++i)
        s += double{hrow[i]} * inv * norm.data<float>()[i] * head.data<float>()[v * kHidden + i];
      worst = std::max(worst, std::abs(s - logits[t * kVocab + v]));
      peak = std::max(peak, std::abs(s));
    }
    EXPECT_LT(worst, 1e-4 * peak) << "row " << t;
  }
}

TEST(HiddenCaptureTest, AChunkedPrefillCapturesWhatAWholeOneDoes) {
  auto model = builtin_model_registry().create_causal_lm(kDir);
  std::vector<float> logits;
  const int n = static_cast<int>(kPrompt.size());
  for (int layer = 0; layer <= kLayers; ++layer) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    model->init_kv_cache(2);
    ForwardBatch::HiddenCapture whole{layer, {}, {}};
    model->forward(slice(0, n, &whole), logits);
    model->init_kv_cache(2);
    ForwardBatch::HiddenCapture first{layer, {}, {}}, rest{layer, {}, {}};
    model->forward(slice(0, 3, &first), logits);
    model->forward(slice(3, n - 3, &rest), logits);
    std::vector<float> chunked = first.hidden;
    chunked.insert(chunked.end(), rest.hidden.begin(), rest.hidden.end());
    ASSERT_EQ(chunked.size(), whole.hidden.size());
    for (size_t i = 0; i < chunked.size(); ++i) {
      ASSERT_NEAR(chunked[i], whole.hidden[i], 1e-5 * (1.0 + std::abs(whole.hidden[i]))) << "element " << i;
    }
    if (layer == 1) {  // a middle layer is neither the embeddings nor the last layer's output
      ForwardBatch::HiddenCapture last{kLayers, {}, {}};
      model->init_kv_cache(2);
      model->forward(slice(0, n, &last), logits);
      EXPECT_NE(whole.hidden, whole.embeddings);
      EXPECT_NE(whole.hidden, last.hidden);
    }
  }
  ForwardBatch::HiddenCapture bad{kLayers + 2, {}, {}};
  model->init_kv_cache(2);
  try {
    model->forward(slice(0, n, &bad), logits);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "forward: capture layer 4 is outside 0..3");
  }
}

}  // namespace
}  // namespace omni::model
