// The mixture-of-experts MLP (model/moe_mlp.h) against a float64 evaluation of its definition, from
// both expert layouts of one set of random weights, and the router's choice on its own.
#include "model/moe_mlp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "support/temp_dir.h"

namespace omni::model {
namespace {

namespace fs = std::filesystem;
using tensor::DType;
using tensor::Tensor;

constexpr int kExperts = 6, kTopK = 3, kHidden = 12, kInter = 5, kTokens = 9, kShared = 7;

struct Weights {
  std::vector<float> router;             // [E, H]
  std::vector<std::vector<float>> gate;  // per expert [I, H]
  std::vector<std::vector<float>> up;    // per expert [I, H]
  std::vector<std::vector<float>> down;  // per expert [H, I]
  // The shared expert: [I_s, H], [I_s, H], [H, I_s], and its gate [1, H].
  std::vector<float> shared_gate, shared_up, shared_down, shared_expert_gate;
};

Weights random_weights(std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto draw = [&](size_t n, float scale) {
    std::vector<float> v(n);
    for (float& x : v) x = scale * normal(rng);
    return v;
  };
  Weights w;
  w.router = draw(kExperts * kHidden, 1.0f);
  for (int e = 0; e < kExperts; ++e) {
    w.gate.push_back(draw(kInter * kHidden, 0.4f));
    w.up.push_back(draw(kInter * kHidden, 0.4f));
    w.down.push_back(draw(kHidden * kInter, 0.5f));
  }
  w.shared_gate = draw(kShared * kHidden, 0.4f);
  w.shared_up = draw(kShared * kHidden, 0.4f);
  w.shared_down = draw(kHidden * kShared, 0.5f);
  w.shared_expert_gate = draw(kHidden, 0.5f);
  return w;
}

// The per-expert layout, as released checkpoints store it; with `shared`, plus a shared expert
// (the Qwen3-Omni talker's block).
void write_per_expert(const fs::path& dir, const Weights& w, bool shared = false) {
  fs::create_directories(dir);
  SafetensorsWriter writer(DType::kF32);
  writer.add("layer.mlp.gate.weight", {kExperts, kHidden}, w.router.data());
  for (int e = 0; e < kExperts; ++e) {
    const std::string p = "layer.mlp.experts." + std::to_string(e) + ".";
    writer.add(p + "gate_proj.weight", {kInter, kHidden}, w.gate[e].data());
    writer.add(p + "up_proj.weight", {kInter, kHidden}, w.up[e].data());
    writer.add(p + "down_proj.weight", {kHidden, kInter}, w.down[e].data());
  }
  if (shared) {
    writer.add("layer.mlp.shared_expert.gate_proj.weight", {kShared, kHidden}, w.shared_gate.data());
    writer.add("layer.mlp.shared_expert.up_proj.weight", {kShared, kHidden}, w.shared_up.data());
    writer.add("layer.mlp.shared_expert.down_proj.weight", {kHidden, kShared}, w.shared_down.data());
    writer.add("layer.mlp.shared_expert_gate.weight", {1, kHidden}, w.shared_expert_gate.data());
  }
  writer.write(dir / "model.safetensors");
}

// transformers 5's fused tensors: gate_up_proj [E, 2I, H] (gate rows, then up rows), down_proj [E, H, I].
void write_fused(const fs::path& dir, const Weights& w) {
  fs::create_directories(dir);
  std::vector<float> gate_up, down;
  for (int e = 0; e < kExperts; ++e) {
    gate_up.insert(gate_up.end(), w.gate[e].begin(), w.gate[e].end());
    gate_up.insert(gate_up.end(), w.up[e].begin(), w.up[e].end());
    down.insert(down.end(), w.down[e].begin(), w.down[e].end());
  }
  SafetensorsWriter writer(DType::kF32);
  writer.add("layer.mlp.gate.weight", {kExperts, kHidden}, w.router.data());
  writer.add("layer.mlp.experts.gate_up_proj", {kExperts, 2 * kInter, kHidden}, gate_up.data());
  writer.add("layer.mlp.experts.down_proj", {kExperts, kHidden, kInter}, down.data());
  writer.write(dir / "model.safetensors");
}

// One SwiGLU of width `inter` on `row`, in float64, added times `weight` to `out`.
void add_swiglu(const float* gate, const float* up, const float* down, int inter, const float* row, double weight,
                double* out) {
  std::vector<double> act(inter);
  for (int r = 0; r < inter; ++r) {
    double g = 0.0, u = 0.0;
    for (int i = 0; i < kHidden; ++i) {
      g += static_cast<double>(gate[r * kHidden + i]) * row[i];
      u += static_cast<double>(up[r * kHidden + i]) * row[i];
    }
    act[r] = g / (1.0 + std::exp(-g)) * u;
  }
  for (int o = 0; o < kHidden; ++o) {
    double y = 0.0;
    for (int r = 0; r < inter; ++r) y += static_cast<double>(down[o * inter + r]) * act[r];
    out[o] += weight * y;
  }
}

// The block's definition in float64: softmax over the router logits, the top k, renormalised,
// the weighted sum of the chosen experts' SwiGLU outputs; with `shared`, plus the shared expert's
// SwiGLU times the sigmoid of its gate.
std::vector<double> reference(const Weights& w, const std::vector<float>& x, bool norm_topk_prob, bool shared = false) {
  std::vector<double> out(kTokens * kHidden, 0.0);
  for (int t = 0; t < kTokens; ++t) {
    const float* row = &x[t * kHidden];
    if (shared) {
      double g = 0.0;
      for (int i = 0; i < kHidden; ++i) g += static_cast<double>(w.shared_expert_gate[i]) * row[i];
      add_swiglu(w.shared_gate.data(), w.shared_up.data(), w.shared_down.data(), kShared, row,
                 1.0 / (1.0 + std::exp(-g)), &out[t * kHidden]);
    }
    std::vector<double> logits(kExperts);
    for (int e = 0; e < kExperts; ++e) {
      for (int i = 0; i < kHidden; ++i) logits[e] += static_cast<double>(w.router[e * kHidden + i]) * row[i];
    }
    const double top = *std::max_element(logits.begin(), logits.end());
    std::vector<double> probs(kExperts);
    double sum = 0.0;
    for (int e = 0; e < kExperts; ++e) sum += probs[e] = std::exp(logits[e] - top);
    for (double& p : probs) p /= sum;
    std::vector<int> order(kExperts);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return probs[a] > probs[b]; });
    double kept = 0.0;
    for (int j = 0; j < kTopK; ++j) kept += probs[order[j]];
    for (int j = 0; j < kTopK; ++j) {
      const int e = order[j];
      const double weight = norm_topk_prob ? probs[e] / kept : probs[e];
      add_swiglu(w.gate[e].data(), w.up[e].data(), w.down[e].data(), kInter, row, weight, &out[t * kHidden]);
    }
  }
  return out;
}

TEST(MoeMlpTest, BothExpertLayoutsComputeTheBlocksDefinition) {
  std::mt19937 rng(11);
  const Weights w = random_weights(rng);
  testing::TempDir dir;
  write_per_expert(dir.path() / "per_expert", w);
  write_fused(dir.path() / "fused", w);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(kTokens * kHidden);
  for (float& v : x) v = normal(rng);
  const Tensor input = Tensor::borrow(x.data(), {kTokens, kHidden}, DType::kF32);

  for (bool norm_topk_prob : {true, false}) {
    SCOPED_TRACE(norm_topk_prob ? "renormalised" : "plain probabilities");
    MoeConfig moe{.num_experts = kExperts,
                  .num_experts_per_tok = kTopK,
                  .moe_intermediate_size = kInter,
                  .norm_topk_prob = norm_topk_prob,
                  .sparse_layers = {true}};
    const std::vector<double> want = reference(w, x, norm_topk_prob);
    std::vector<std::vector<float>> results;
    for (const char* layout : {"per_expert", "fused"}) {
      const Checkpoint ckpt = Checkpoint::open(dir.path() / layout);
      MoeMlp mlp(ckpt, "layer.mlp.", moe, kHidden, DType::kF32, tensor::Device::cpu());
      Tensor out = Tensor::empty({kTokens, kHidden}, DType::kF32);
      mlp.forward(input, out);
      results.emplace_back(out.data<float>(), out.data<float>() + out.numel());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(results.back()[i], want[i], 1e-5 * (1.0 + std::abs(want[i]))) << layout << " element " << i;
      }
    }
    EXPECT_EQ(results[0], results[1]) << "the two layouts hold the same weights";
  }
}

TEST(MoeMlpTest, ASharedExpertAddsItsGatedOutput) {
  std::mt19937 rng(5);
  const Weights w = random_weights(rng);
  testing::TempDir dir;
  write_per_expert(dir.path(), w, /*shared=*/true);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(kTokens * kHidden);
  for (float& v : x) v = normal(rng);
  MoeConfig moe{.num_experts = kExperts,
                .num_experts_per_tok = kTopK,
                .moe_intermediate_size = kInter,
                .norm_topk_prob = true,
                .shared_expert_intermediate_size = kShared,
                .sparse_layers = {true}};
  MoeMlp mlp(Checkpoint::open(dir.path()), "layer.mlp.", moe, kHidden, DType::kF32, tensor::Device::cpu());
  Tensor out = Tensor::empty({kTokens, kHidden}, DType::kF32);
  mlp.forward(Tensor::borrow(x.data(), {kTokens, kHidden}, DType::kF32), out);
  const std::vector<double> want = reference(w, x, true, /*shared=*/true);
  const std::vector<double> routed_only = reference(w, x, true);
  double shared_part = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(out.data<float>()[i], want[i], 1e-5 * (1.0 + std::abs(want[i]))) << "element " << i;
    shared_part = std::max(shared_part, std::abs(want[i] - routed_only[i]));
  }
  EXPECT_GT(shared_part, 0.1);  // the shared expert's share is not negligible in this test

  // Without its tensors the layer names the first one missing.
  testing::TempDir bare;
  write_per_expert(bare.path(), w);
  try {
    MoeMlp missing(Checkpoint::open(bare.path()), "layer.mlp.", moe, kHidden, DType::kF32, tensor::Device::cpu());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLoadFailed);
    EXPECT_NE(std::string(e.what()).find("layer.mlp.shared_expert.gate_proj.weight"), std::string::npos) << e.what();
  }
}

TEST(MoeMlpTest, RouteKeepsTheMostProbableExpertsInOrder) {
  const float logits[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  int32_t experts[3];
  float weights[3];
  MoeMlp::route(logits, 5, 3, /*norm_topk_prob=*/false, experts, weights);
  // Ties go to the lower index, as torch.topk on the CPU.
  EXPECT_EQ(std::vector<int32_t>(experts, experts + 3), (std::vector<int32_t>{1, 3, 4}));
  double sum = 0.0;
  for (float l : logits) sum += std::exp(l);
  EXPECT_NEAR(weights[0], std::exp(2.0) / sum, 1e-6);
  EXPECT_NEAR(weights[2], std::exp(1.0) / sum, 1e-6);
  MoeMlp::route(logits, 5, 3, /*norm_topk_prob=*/true, experts, weights);
  EXPECT_NEAR(weights[0] + weights[1] + weights[2], 1.0, 1e-6);
  EXPECT_NEAR(weights[0], std::exp(2.0) / (2 * std::exp(2.0) + std::exp(1.0)), 1e-6);
}

TEST(MoeMlpTest, AnIncompleteExpertLayoutNamesTheMissingTensor) {
  std::mt19937 rng(3);
  const Weights w = random_weights(rng);
  testing::TempDir dir;
  fs::create_directories(dir.path());
  SafetensorsWriter writer(DType::kF32);
  writer.add("layer.mlp.gate.weight", {kExperts, kHidden}, w.router.data());
  writer.write(dir.path() / "model.safetensors");
  MoeConfig moe{.num_experts = kExperts,
                .num_experts_per_tok = kTopK,
                .moe_intermediate_size = kInter,
                .norm_topk_prob = true,
                .sparse_layers = {true}};
  try {
    MoeMlp mlp(Checkpoint::open(dir.path()), "layer.mlp.", moe, kHidden, DType::kF32, tensor::Device::cpu());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLoadFailed);
    EXPECT_NE(std::string(e.what()).find("layer.mlp.experts.0.gate_proj.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace omni::model
