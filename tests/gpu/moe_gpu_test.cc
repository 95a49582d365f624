// The mixture-of-experts layer on CUDA (model/moe_mlp.h's device path, tensor/moe_ops.h) against the
// CPU's host router on the same weights: the routing kernel against MoeMlp::route, the grouping's
// invariants, and the whole layer in float32 and bfloat16 over several expert counts, top-k > 1,
// 1 to 300 tokens and experts that get no token; and random checkpoints (Checkpoint::random) filled
// on the GPU with the host's bits. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "model/moe_mlp.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "support/temp_dir.h"
#include "tensor/backend.h"
#include "tensor/convert.h"
#include "tensor/moe_ops.h"
#include "tensor/ops.h"

namespace omni::model {
namespace {

namespace fs = std::filesystem;
using tensor::Device;
using tensor::DType;
using tensor::Tensor;

std::vector<float> to_f32(const Tensor& t) {
  const Tensor host = t.device().type == tensor::DeviceType::kCpu ? t : t.to(Device::cpu());
  std::vector<float> out(static_cast<size_t>(host.numel()));
  tensor::convert_to_f32(host.dtype(), host.raw(), out.data(), out.size());
  return out;
}

Tensor on_cuda(const std::vector<float>& values, const tensor::Shape& shape, DType dtype) {
  Tensor host = Tensor::empty(shape, dtype);
  tensor::convert_elements(DType::kF32, values.data(), dtype, host.raw(), values.size());
  return host.to(Device::cuda(0));
}

float round_bf16(float v) { return tensor::bf16_to_f32(tensor::f32_to_bf16(v)); }

class MoeGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (tensor::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  }
};

// The kernel's choice is the host router's: the same experts in the same order (ties to the lower
// index), the same weights to float32 rounding, with and without renormalisation.
TEST_F(MoeGpuTest, RouteChoosesTheHostRoutersExperts) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const auto& [experts, k] : std::vector<std::pair<int, int>>{{8, 2}, {128, 8}, {60, 4}, {5, 5}}) {
    const int tokens = 37;
    std::vector<float> logits(static_cast<size_t>(tokens * experts));
    for (float& v : logits) v = normal(rng);
    // Exact ties in one row: experts 1 and 3 share the largest logit.
    logits[1] = logits[3] = 9.0f;
    for (bool norm : {true, false}) {
      SCOPED_TRACE(std::to_string(experts) + " experts, top " + std::to_string(k) + (norm ? ", renormalised" : ""));
      const Tensor x = on_cuda(logits, {tokens, experts}, DType::kF32);
      Tensor chosen = Tensor::empty({tokens, k}, DType::kI32, Device::cuda(0));
      Tensor weights = Tensor::empty({tokens, k}, DType::kF32, Device::cuda(0));
      tensor::ops::moe_route(x, k, norm, chosen, weights);
      const Tensor got_experts = chosen.to(Device::cpu());
      const std::vector<float> got_weights = to_f32(weights);
      for (int t = 0; t < tokens; ++t) {
        std::vector<int32_t> want_e(k);
        std::vector<float> want_w(k);
        MoeMlp::route(logits.data() + t * experts, experts, k, norm, want_e.data(), want_w.data());
        for (int j = 0; j < k; ++j) {
          ASSERT_EQ(got_experts.data<int32_t>()[t * k + j], want_e[j]) << "token " << t << " choice " << j;
          ASSERT_NEAR(got_weights[t * k + j], want_w[j], 2e-6 * std::max(1.0f, want_w[j])) << "token " << t;
        }
      }
      if (experts > 3) EXPECT_EQ(got_experts.data<int32_t>()[0], 1) << "a tie goes to the lower index";
    }
  }
}

// Offsets are the counts' prefix sums; every pair gets one row of its expert's range, whose token is
// the pair's; experts without pairs get empty ranges.
TEST_F(MoeGpuTest, GroupPlacesEveryPairInItsExpertsRange) {
  std::mt19937 rng(9);
  for (const auto& [tokens, experts, k] :
       std::vector<std::tuple<int, int, int>>{{1, 128, 8}, {3, 8, 2}, {300, 16, 4}, {1000, 4096, 1}, {2049, 128, 8}}) {
    SCOPED_TRACE(std::to_string(tokens) + " tokens, " + std::to_string(experts) + " experts");
    Tensor chosen = Tensor::empty({tokens, k}, DType::kI32);
    std::vector<int> counts(static_cast<size_t>(experts), 0);
    for (int t = 0; t < tokens; ++t) {
      // k distinct experts per token, from the first half only: the rest get nothing.
      std::vector<int32_t> pool(static_cast<size_t>(std::max(k, experts / 2)));
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), rng);
      for (int j = 0; j < k; ++j) {
        chosen.data<int32_t>()[t * k + j] = pool[j];
        ++counts[pool[j]];
      }
    }
    const Tensor device_chosen = chosen.to(Device::cuda(0));
    Tensor offsets = Tensor::empty({experts + 1}, DType::kI32, Device::cuda(0));
    Tensor rows = Tensor::empty({tokens * k}, DType::kI32, Device::cuda(0));
    Tensor index = Tensor::empty({tokens, k}, DType::kI32, Device::cuda(0));
    tensor::ops::moe_group(device_chosen, experts, offsets, rows, index);
    const Tensor off = offsets.to(Device::cpu()), row = rows.to(Device::cpu()), idx = index.to(Device::cpu());
    int run = 0;
    for (int e = 0; e <= experts; ++e) {
      ASSERT_EQ(off.data<int32_t>()[e], run) << "expert " << e;
      if (e < experts) run += counts[e];
    }
    std::vector<bool> used(static_cast<size_t>(tokens * k), false);
    for (int t = 0; t < tokens; ++t) {
      for (int j = 0; j < k; ++j) {
        const int32_t p = idx.data<int32_t>()[t * k + j], e = chosen.data<int32_t>()[t * k + j];
        ASSERT_GE(p, off.data<int32_t>()[e]);
        ASSERT_LT(p, off.data<int32_t>()[e + 1]);
        ASSERT_FALSE(used[p]) << "row " << p << " taken twice";
        used[p] = true;
        ASSERT_EQ(row.data<int32_t>()[p], t);
      }
    }
  }
}

struct MoeCase {
  int experts, k, hidden, inter;
  int dead;        // the last `dead` experts are never chosen
  int shared = 0;  // the shared expert's width (0: none)
};

// Random weights and inputs for `c`, bfloat16-representable (so the float32 CPU layer and the
// bfloat16 GPU layer hold the same values), written per expert in bfloat16.
struct MoeFixture {
  MoeFixture(const MoeCase& c, const fs::path& dir, uint32_t seed) : c(c), rng(seed) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const auto draw = [&](size_t n, float scale) {
      std::vector<float> v(n);
      for (float& x : v) x = round_bf16(scale * normal(rng));
      return v;
    };
    router = draw(static_cast<size_t>(c.experts * c.hidden), 1.0f / std::sqrt(static_cast<float>(c.hidden)));
    // Column 0 of every input is 4 (see input_row): the dead experts' -4 there makes their logits
    // about -16, far below the others'.
    for (int e = c.experts - c.dead; e < c.experts; ++e) router[static_cast<size_t>(e * c.hidden)] = -4.0f;
    fs::create_directories(dir);
    SafetensorsWriter writer(DType::kBF16);
    writer.add("mlp.gate.weight", {c.experts, c.hidden}, router.data());
    for (int e = 0; e < c.experts; ++e) {
      const std::string p = "mlp.experts." + std::to_string(e) + ".";
      writer.add(p + "gate_proj.weight", {c.inter, c.hidden},
                 draw(static_cast<size_t>(c.inter * c.hidden), 1.0f / std::sqrt(float(c.hidden))).data());
      writer.add(p + "up_proj.weight", {c.inter, c.hidden},
                 draw(static_cast<size_t>(c.inter * c.hidden), 1.0f / std::sqrt(float(c.hidden))).data());
      writer.add(p + "down_proj.weight", {c.hidden, c.inter},
                 draw(static_cast<size_t>(c.hidden * c.inter), 1.0f / std::sqrt(float(c.inter))).data());
    }
    if (c.shared > 0) {
      const std::string p = "mlp.shared_expert.";
      for (const char* name : {"gate_proj", "up_proj"}) {
        writer.add(p + name + ".weight", {c.shared, c.hidden},
                   draw(static_cast<size_t>(c.shared * c.hidden), 1.0f / std::sqrt(float(c.hidden))).data());
      }
      writer.add(p + "down_proj.weight", {c.hidden, c.shared},
                 draw(static_cast<size_t>(c.hidden * c.shared), 1.0f / std::sqrt(float(c.shared))).data());
      writer.add("mlp.shared_expert_gate.weight", {1, c.hidden},
                 draw(static_cast<size_t>(c.hidden), 1.0f / std::sqrt(float(c.hidden))).data());
    }
    writer.write(dir / "model.safetensors");
  }

  // A token whose k-th and (k+1)-th router logits are further apart than `margin` (relative to the
  // largest), so that rounding the logits cannot change which experts it picks.
  std::vector<float> input_row(double margin) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (;;) {
      std::vector<float> x(static_cast<size_t>(c.hidden));
      for (float& v : x) v = round_bf16(normal(rng));
      x[0] = 4.0f;
      std::vector<double> logits(static_cast<size_t>(c.experts));
      double largest = 0.0;
      for (int e = 0; e < c.experts; ++e) {
        for (int i = 0; i < c.hidden; ++i) logits[e] += double(router[static_cast<size_t>(e * c.hidden + i)]) * x[i];
        largest = std::max(largest, std::abs(logits[e]));
      }
      std::sort(logits.begin(), logits.end(), std::greater<>());
      if (c.k == c.experts || logits[c.k - 1] - logits[c.k] > margin * std::max(1.0, largest)) return x;
    }
  }

  MoeCase c;
  std::mt19937 rng;
  std::vector<float> router;
};

// The CUDA layer against the CPU's host router on the same weights and inputs.
//
// float32: the same arithmetic in another order (float32 sums over at most a few hundred terms),
// so 1e-5 relative to the output's scale.
//
// bfloat16: the GPU rounds to bfloat16 (8 significant bits, rounding error at most 2^-9 relative)
// where the CPU keeps float32: the router logits (before the softmax, as Hugging Face does, which
// moves a probability by up to 2^-9 * |logit|, about 1% for logits near 5), the routing weights, the
// gate/up outputs, SiLU-and-multiply, the experts' outputs and the sum. On the H200 the mean error
// came out at 2.6-4.1e-3 of the output's RMS (about 2^-8: six roundings of terms about the RMS in
// size) and the largest of ~40,000 elements at up to 4-5 times the mean. The bound is 2^-5 relative
// plus 2^-5 of the RMS, and the mean error must stay under 2^-7 of the RMS; a wrong expert or a
// wrong row is off by about the RMS itself, 30 times the bound.
void expect_cuda_matches_cpu(const MoeCase& c, DType dtype, const std::vector<int>& token_counts) {
  testing::TempDir dir;
  MoeFixture fixture(c, dir.path(), 17 + c.experts);
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  const MoeConfig config{.num_experts = c.experts,
                         .num_experts_per_tok = c.k,
                         .moe_intermediate_size = c.inter,
                         .norm_topk_prob = true,
                         .shared_expert_intermediate_size = c.shared,
                         .sparse_layers = {true}};
  const MoeMlp cpu(ckpt, "mlp.", config, c.hidden, DType::kF32, Device::cpu());
  const MoeMlp gpu(ckpt, "mlp.", config, c.hidden, dtype, Device::cuda(0));
  ASSERT_TRUE(gpu.runs_on_device());
  const bool bf16 = dtype == DType::kBF16;
  for (int tokens : token_counts) {
    SCOPED_TRACE(std::to_string(tokens) + " tokens");
    std::vector<float> x;
    for (int t = 0; t < tokens; ++t) {
      const std::vector<float> row = fixture.input_row(bf16 ? 2.0 / 256 : 1e-4);
      x.insert(x.end(), row.begin(), row.end());
    }
    const Tensor host_x = Tensor::borrow(x.data(), {tokens, c.hidden}, DType::kF32);
    Tensor want_t = Tensor::empty({tokens, c.hidden}, DType::kF32);
    cpu.forward(host_x, want_t);
    const std::vector<float> want = to_f32(want_t);
    const Tensor gpu_x = on_cuda(x, {tokens, c.hidden}, dtype);
    Tensor out = Tensor::empty({tokens, c.hidden}, dtype, Device::cuda(0));
    gpu.forward(gpu_x, out);
    const std::vector<float> got = to_f32(out);
    double rms = 0.0;
    for (float v : want) rms += double(v) * v;
    rms = std::sqrt(rms / want.size());
    ASSERT_GT(rms, 1e-3);
    const double rtol = bf16 ? 1.0 / 32 : 1e-5, atol = bf16 ? rms / 32 : 1e-5 * rms;
    double worst = 0.0, mean = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double err = std::abs(double(got[i]) - want[i]);
      worst = std::max(worst, err / (atol + rtol * std::abs(want[i])));
      mean += err;
      ASSERT_LE(err, atol + rtol * std::abs(want[i])) << "element " << i << " (token " << i / c.hidden << ")";
    }
    mean /= want.size();
    EXPECT_LE(mean, (bf16 ? 1.0 / 128 : 2e-6) * rms);
    std::printf("  %s E=%d k=%d H=%d I=%d T=%d: worst %.2f of the bound, mean error %.2e of the rms\n",
                bf16 ? "bf16" : "f32", c.experts, c.k, c.hidden, c.inter, tokens, worst, mean / rms);
    // Run again: the same bits (the rows' order inside an expert does not reach the result).
    Tensor again = Tensor::empty({tokens, c.hidden}, dtype, Device::cuda(0));
    gpu.forward(gpu_x, again);
    EXPECT_EQ(to_f32(again), got);
  }
}

const std::vector<int> kTokenCounts = {1, 2, 5, 8, 33, 64, 300};

// 8 experts of 2: 300 tokens give 75 rows per expert, the tensor-core tiles in bfloat16.
TEST_F(MoeGpuTest, EightExpertsTopTwoMatchTheCpu) {
  for (DType dtype : {DType::kF32, DType::kBF16}) expect_cuda_matches_cpu({8, 2, 64, 32, 0}, dtype, kTokenCounts);
}

// 16 experts of 4, four of them never chosen (empty ranges at every token count).
TEST_F(MoeGpuTest, ExpertsWithNoTokensMatchTheCpu) {
  for (DType dtype : {DType::kF32, DType::kBF16}) expect_cuda_matches_cpu({16, 4, 128, 64, 4}, dtype, kTokenCounts);
}

// The released thinker's routing (128 experts, top 8) on smaller matrices: most experts are empty at
// decode sizes; 300 tokens stay on the few-row kernel (19 rows per expert on average).
TEST_F(MoeGpuTest, HundredTwentyEightExpertsTopEightMatchTheCpu) {
  for (DType dtype : {DType::kF32, DType::kBF16}) expect_cuda_matches_cpu({128, 8, 256, 96, 0}, dtype, kTokenCounts);
}

// The Qwen3-Omni talker's block: 128 experts of 6 and a shared expert gated by its sigmoid.
TEST_F(MoeGpuTest, ASharedExpertMatchesTheCpu) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    expect_cuda_matches_cpu({128, 6, 128, 48, 0, 96}, dtype, kTokenCounts);
  }
}

// 4 experts of 2 with tile-sized matrices: tiles with partial rows at the end of every expert.
TEST_F(MoeGpuTest, TiledProductsMatchTheCpu) { expect_cuda_matches_cpu({4, 2, 128, 64, 0}, DType::kBF16, {130, 300}); }

// The grouped products against one linear per expert, with rows gathered and not.
TEST_F(MoeGpuTest, GroupedLinearEqualsOneLinearPerExpert) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int experts = 6, n = 128, kdim = 96, tokens = 700;
  std::vector<float> w(static_cast<size_t>(experts * n * kdim)), x(static_cast<size_t>(tokens * kdim));
  for (float& v : w) v = round_bf16(0.1f * normal(rng));
  for (float& v : x) v = round_bf16(normal(rng));
  // Expert e takes rows for tokens t with t % 7 == e (expert 6 of 7 buckets does not exist: those
  // tokens are dropped), so the counts are uneven and none is empty.
  std::vector<int32_t> offsets{0}, rows;
  for (int e = 0; e < experts; ++e) {
    for (int t = 0; t < tokens; ++t)
      if (t % 7 == e || (e == 0 && t % 3 == 0)) rows.push_back(t);
    offsets.push_back(static_cast<int32_t>(rows.size()));
  }
  const int pairs = static_cast<int>(rows.size());
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(tensor::dtype_name(dtype));
    const Tensor gw = on_cuda(w, {experts * n, kdim}, dtype), gx = on_cuda(x, {tokens, kdim}, dtype);
    Tensor off = Tensor::borrow(offsets.data(), {experts + 1}, DType::kI32).to(Device::cuda(0));
    Tensor rws = Tensor::borrow(rows.data(), {pairs}, DType::kI32).to(Device::cuda(0));
    Tensor out = Tensor::empty({pairs, n}, dtype, Device::cuda(0));
    tensor::ops::grouped_linear(gx, rws, gw, off, tokens, out);
    const std::vector<float> got = to_f32(out);
    for (int e = 0; e < experts; ++e) {
      const int b = offsets[e], m = offsets[e + 1] - b;
      Tensor picked = Tensor::empty({m, kdim}, dtype, Device::cuda(0));
      tensor::ops::embedding(gx, rws.slice_rows(b, b + m), picked);
      Tensor want = Tensor::empty({m, n}, dtype, Device::cuda(0));
      tensor::ops::linear(picked, gw.slice_rows(e * n, (e + 1) * n), Tensor(), want);
      const std::vector<float> ref = to_f32(want);
      for (int i = 0; i < m * n; ++i) {
        const double tol = dtype == DType::kF32 ? 1e-4 : 1.0 / 64 * (1.0 + std::abs(ref[i]));
        ASSERT_NEAR(got[static_cast<size_t>(b * n + i)], ref[i], tol) << "expert " << e << " element " << i;
      }
    }
    // Without rows: x already in grouped order.
    Tensor grouped = Tensor::empty({pairs, kdim}, dtype, Device::cuda(0));
    tensor::ops::embedding(gx, rws, grouped);
    Tensor direct = Tensor::empty({pairs, n}, dtype, Device::cuda(0));
    tensor::ops::grouped_linear(grouped, Tensor(), gw, off, tokens, direct);
    EXPECT_EQ(to_f32(direct), got);
  }
}

TEST_F(MoeGpuTest, OpsNameWhatIsWrong) {
  Tensor logits = Tensor::zeros({3, 8}, DType::kF32, Device::cuda(0));
  Tensor experts = Tensor::empty({3, 2}, DType::kI32, Device::cuda(0));
  Tensor weights = Tensor::empty({3, 2}, DType::kBF16, Device::cuda(0));
  try {
    tensor::ops::moe_route(logits, 2, true, experts, weights);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("moe_route: weights must be [T, top_k] in logits' dtype"), std::string::npos)
        << e.what();
  }
  Tensor cpu_logits = Tensor::zeros({3, 8}, DType::kF32);
  Tensor cpu_experts = Tensor::empty({3, 2}, DType::kI32), cpu_weights = Tensor::empty({3, 2}, DType::kF32);
  try {
    tensor::ops::moe_route(cpu_logits, 2, true, cpu_experts, cpu_weights);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  }
}

// A random checkpoint's values are the same on the GPU as on the host, slices included.
TEST_F(MoeGpuTest, RandomCheckpointFillsTheHostsBitsOnTheGpu) {
  const Checkpoint ckpt = Checkpoint::random("/nonexistent", 42);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Tensor host = ckpt.load("layers.0.mlp.gate.weight", {96, 40}, dtype);
    const Tensor gpu = ckpt.load("layers.0.mlp.gate.weight", {96, 40}, dtype, Device::cuda(0));
    EXPECT_EQ(to_f32(gpu), to_f32(host));
    Tensor slice = Tensor::empty({96, 8}, dtype, Device::cuda(0));
    ckpt.load_slice_into("layers.0.mlp.gate.weight", {96, 40}, 1, 16, 8, slice, 0);
    const std::vector<float> s = to_f32(slice), whole = to_f32(host);
    for (int r = 0; r < 96; ++r)
      for (int c = 0; c < 8; ++c) ASSERT_EQ(s[r * 8 + c], whole[r * 40 + 16 + c]);
  }
}

}  // namespace
}  // namespace omni::model
