// How ArEngine sets up fixed-size decode steps (CUDA graphs) on a model on a GPU: the padded batch
// sizes and table width it hands the model, enforce_eager, and what it records when the model
// accepts or declines. The model is the engine tests' fake claiming to live on cuda:0 (the KV pool
// is sized by num_gpu_blocks_override, so no GPU is touched).
#include <gtest/gtest.h>

#include <vector>

#include "engine/ar_engine.h"
#include "engine/decode_batch_sizes.h"
#include "fake_causal_lm.h"

namespace omni::engine {
namespace {

class GpuClaimingLm : public testing::FakeCausalLm {
 public:
  struct Call {
    std::vector<int> batch_sizes;
    int max_blocks_per_seq = 0;
    bool capture_graphs = false;
  };

  explicit GpuClaimingLm(bool accepts, tensor::Device device = tensor::Device::cuda(0))
      : accepts_(accepts), device_(device) {}
  tensor::Device device() const override { return device_; }
  bool prepare_decode_steps(const std::vector<int>& batch_sizes, int max_blocks_per_seq, bool capture_graphs) override {
    calls.push_back({batch_sizes, max_blocks_per_seq, capture_graphs});
    return accepts_;
  }

  std::vector<Call> calls;

 private:
  bool accepts_;
  tensor::Device device_;
};

EngineConfig small_config(bool enforce_eager) {
  EngineConfig config;
  config.max_num_seqs = 20;
  config.max_model_len = 100;
  config.num_gpu_blocks_override = 64;
  config.enforce_eager = enforce_eager;
  return config;
}

TEST(DecodeGraphsEngineTest, HandsTheModelThePaddedSizesAndTheWidestTableAndRecordsGraphs) {
  GpuClaimingLm model(true);
  ArEngine engine(model, small_config(false));
  ASSERT_EQ(model.calls.size(), 1u);
  EXPECT_EQ(model.calls[0].batch_sizes, (std::vector<int>{1, 2, 4, 8, 16, 24}));
  EXPECT_EQ(model.calls[0].max_blocks_per_seq, 7);  // ceil(100 / 16)
  EXPECT_TRUE(model.calls[0].capture_graphs);
  EXPECT_EQ(engine.config().decode_batch_sizes, decode_batch_sizes(20));
  EXPECT_TRUE(engine.config().cuda_graphs);
}

TEST(DecodeGraphsEngineTest, EnforceEagerPadsTheSameWayWithoutGraphs) {
  GpuClaimingLm model(true);
  ArEngine engine(model, small_config(true));
  ASSERT_EQ(model.calls.size(), 1u);
  EXPECT_EQ(model.calls[0].batch_sizes, (std::vector<int>{1, 2, 4, 8, 16, 24}));
  EXPECT_FALSE(model.calls[0].capture_graphs);
  EXPECT_EQ(engine.config().decode_batch_sizes, decode_batch_sizes(20));
  EXPECT_FALSE(engine.config().cuda_graphs);
}

TEST(DecodeGraphsEngineTest, AModelThatDeclinesDecodesUnpadded) {
  GpuClaimingLm model(false);
  ArEngine engine(model, small_config(false));
  EXPECT_EQ(model.calls.size(), 1u);
  EXPECT_TRUE(engine.config().decode_batch_sizes.empty());
  EXPECT_FALSE(engine.config().cuda_graphs);
}

TEST(DecodeGraphsEngineTest, AModelOnTheCpuIsNotAsked) {
  GpuClaimingLm model(true, tensor::Device::cpu());
  ArEngine engine(model, small_config(false));
  EXPECT_TRUE(model.calls.empty());
  EXPECT_TRUE(engine.config().decode_batch_sizes.empty());
  EXPECT_FALSE(engine.config().cuda_graphs);
}

}  // namespace
}  // namespace omni::engine
