// The Qwen3-Omni code2wav (model/qwen3_omni/code2wav.h) on CUDA (float32) against the CPU: the
// tiny BF16 fixture of scripts/reference/qwen3_omni_code2wav_reference.py (whose CPU decode
// matches its float64 reference, tests/model/qwen3_omni/code2wav_test.cc) streamed in chunks on the
// GPU, and two streams batched, one starting while the other is midway. The tolerance is the Qwen3-TTS
// decoder's on CUDA (codec_decoder_gpu_test.cc): 1e-4 absolute. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "model/qwen3_omni/code2wav.h"
#include "tensor/backend.h"
#include "tensor/npy.h"

namespace omni::model::qwen3_omni {
namespace {

const std::filesystem::path kFixture =
    std::filesystem::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_omni_code2wav";
constexpr double kTolerance = 1e-4;

double max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(double{a[i]} - b[i]));
  return worst;
}

TEST(Code2WavGpuTest, StreamedAndBatchedOnCudaMatchTheCpu) {
  if (tensor::compiled_backends().find("cuda") == std::string::npos) GTEST_SKIP() << "no CUDA backend in the build";
  if (tensor::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process";
  const tensor::Tensor t = tensor::load_npy(kFixture / "codes.npy");
  const std::vector<int32_t> a(t.data<int32_t>(), t.data<int32_t>() + t.numel());
  const std::vector<int32_t> b(a.rbegin(), a.rend());
  auto cpu = load_code2wav(kFixture);
  auto gpu = load_code2wav(kFixture, tensor::Device::cuda(0));
  const std::vector<float> want_a = cpu->decode(a), want_b = cpu->decode(b);
  // a in chunks of 1, 3, 7, ...; b joins after a's second chunk, in chunks of 5.
  auto sa = gpu->open_stream(), sb = gpu->open_stream();
  std::vector<float> got_a, got_b;
  size_t at_a = 0, at_b = 0;
  const int chunks[] = {1, 3, 7};
  for (int step = 0; at_a < a.size() || at_b < b.size(); ++step) {
    std::vector<AudioDecodeItem> items;
    const size_t na = std::min(a.size() - at_a, static_cast<size_t>(chunks[std::min(step, 2)]) * 16);
    if (na > 0) items.push_back({sa.get(), std::span(a).subspan(at_a, na), &got_a});
    at_a += na;
    if (step >= 2) {
      const size_t nb = std::min(b.size() - at_b, size_t{5 * 16});
      if (nb > 0) items.push_back({sb.get(), std::span(b).subspan(at_b, nb), &got_b});
      at_b += nb;
    }
    gpu->decode_batch(items);
  }
  const double da = max_abs_difference(got_a, want_a), db = max_abs_difference(got_b, want_b);
  std::printf("[code2wav gpu] streamed vs cpu one-shot: %.3g, batched late stream: %.3g\n", da, db);
  EXPECT_EQ(got_a.size(), a.size() / 16 * 1920 - 555);
  EXPECT_LT(da, kTolerance);
  EXPECT_LT(db, kTolerance);
}

}  // namespace
}  // namespace omni::model::qwen3_omni
