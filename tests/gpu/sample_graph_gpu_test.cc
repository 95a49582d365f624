// ops::sample_packed recorded in a DeviceGraph (the code predictor's sampling, tensor/ops.h): the
// per-frame parameters are rewritten in the device buffer between replays, and every replay must
// draw exactly what eager ops::sample draws with those parameters at each sub-step's step (the
// same kernel, so bit for bit, greedy and seeded rows alike). Skips when no GPU is visible (ctest
// label gpu).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tensor/backend.h"
#include "tensor/device_graph.h"
#include "tensor/ops.h"
#include "tensor/sample_packed.h"
#include "tensor/tensor.h"

namespace omni::tensor {
namespace {

TEST(SampleGraphGpuTest, ReplaysDrawWhatEagerSampleDrawsWithTheRewrittenParams) {
  if (compiled_backends().find("cuda") == std::string::npos) GTEST_SKIP() << "no CUDA backend in the build";
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process";
  const Device gpu = Device::cuda(0);
  constexpr int kRows = 5, kVocab = 2048, kSubSteps = 15;
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  // One logits row block per sub-step, fixed on the device (the graph reads their addresses).
  std::vector<Tensor> host_logits, logits;
  for (int g = 0; g < kSubSteps; ++g) {
    Tensor t = Tensor::empty({kRows, kVocab}, DType::kF32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
    host_logits.push_back(t);
    logits.push_back(t.to(gpu));
  }
  Tensor packed = Tensor::empty({kRows, ops::kPackedSamplingParamsWords}, DType::kI32, gpu);
  Tensor drawn = Tensor::empty({kSubSteps, kRows}, DType::kI32, gpu);
  auto frame_params = [&](uint64_t frame) {
    std::vector<ops::SamplingParams> params(kRows);
    for (int r = 0; r < kRows; ++r) {
      params[r].temperature = r == 0 ? 0.0f : 0.9f;  // row 0 greedy
      params[r].top_k = r == 1 ? 0 : 50;
      params[r].top_p = r == 2 ? 0.8f : 1.0f;
      params[r].seed = 1000 + r;
      params[r].step = frame * kSubSteps;
    }
    return params;
  };
  ops::write_sampling_params(frame_params(0), packed);
  const DeviceGraph graph = DeviceGraph::capture(gpu, [&] {
    for (int g = 0; g < kSubSteps; ++g) {
      Tensor ids = drawn.slice_rows(g, g + 1).reshape({kRows});
      ops::sample_packed(logits[g], packed, static_cast<uint64_t>(g), ids);
    }
  });
  for (uint64_t frame = 1; frame <= 3; ++frame) {
    const std::vector<ops::SamplingParams> params = frame_params(frame);
    ops::write_sampling_params(params, packed);
    graph.replay();
    const Tensor got = drawn.to(Device::cpu());
    for (int g = 0; g < kSubSteps; ++g) {
      std::vector<ops::SamplingParams> step = params;
      for (auto& p : step) p.step += g;
      Tensor eager_logits = host_logits[g].to(gpu);
      Tensor want = Tensor::empty({kRows}, DType::kI32);
      ops::sample(eager_logits, step, want);
      for (int r = 0; r < kRows; ++r) {
        EXPECT_EQ(got.data<int32_t>()[g * kRows + r], want.data<int32_t>()[r])
            << "frame " << frame << ", sub-step " << g << ", row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace omni::tensor
