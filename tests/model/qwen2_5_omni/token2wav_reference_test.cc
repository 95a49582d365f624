// Qwen2.5-Omni's token2wav against transformers (tests/data/tiny_qwen2_5_omni/token2wav, written by
// scripts/reference/qwen2_5_omni_token2wav_reference.py on a machine with torch): one DiT evaluation
// of both CFG branches, the guided ODE function, the sway grid, the Kaiser-sinc filter, the whole sampled mel from the
// saved noise, and BigVGAN's waveform, in float32 on the CPU. The checkpoint and spk_dict.pt are the ones transformers
// and torch.save wrote. Skipped while the reference files are absent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/qwen2_5_omni/alias_free_activation.h"
#include "model/qwen2_5_omni/ode_solver.h"
#include "model/qwen2_5_omni/speaker_dict.h"
#include "model/qwen2_5_omni/token2wav.h"
#include "tensor/npy.h"

namespace omni::model::qwen2_5_omni {
namespace {

using tensor::Tensor;

const std::filesystem::path kReference =
    std::filesystem::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen2_5_omni/token2wav";

std::vector<float> values(const Tensor& t) {
  const Tensor h = t.to(tensor::Device::cpu());
  return {h.data<float>(), h.data<float>() + h.numel()};
}

std::vector<float> npy(const char* name) { return values(tensor::load_npy(kReference / (std::string(name) + ".npy"))); }

// max |got - want| / max |want|.
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0.0, peak = 0.0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    worst = std::max(worst, std::abs(double{got[i]} - want[i]));
    peak = std::max(peak, std::abs(double{want[i]}));
  }
  return peak > 0.0 ? worst / peak : worst;
}

double max_abs_error(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0.0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    worst = std::max(worst, std::abs(double{got[i]} - want[i]));
  }
  return worst;
}

class Token2WavReferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kReference / "waveform.npy")) {
      GTEST_SKIP() << kReference << " is absent: run scripts/reference/qwen2_5_omni_token2wav_reference.py --out "
                   << "tests/data/tiny_qwen2_5_omni/token2wav on a machine with torch and transformers 5";
    }
    if (model_ == nullptr) model_ = Token2Wav::load(kReference).release();
    const Tensor codes = tensor::load_npy(kReference / "codes.npy");
    codes_.assign(codes.data<int32_t>(), codes.data<int32_t>() + codes.numel());
    const DitConfig& c = model_->config().dit;
    const SpeakerDict speakers = SpeakerDict::load(kReference / "spk_dict.pt", c.enc_emb_dim, c.mel_dim);
    ASSERT_NE(speakers.find("Chelsie"), nullptr);
    speaker_ = *speakers.find("Chelsie");
  }
  Tensor tensor_of(const char* name) const {
    const Tensor t = tensor::load_npy(kReference / (std::string(name) + ".npy"));
    const int64_t mel = model_->config().dit.mel_dim;
    return t.reshape({t.numel() / mel, mel});
  }

  static Token2Wav* model_;
  std::vector<int32_t> codes_;
  Speaker speaker_;
};
Token2Wav* Token2WavReferenceTest::model_ = nullptr;

TEST_F(Token2WavReferenceTest, SpeakerDictHoldsTheSavedConditioning) {
  EXPECT_EQ(speaker_.xvector, npy("xvector"));
  EXPECT_EQ(speaker_.ref_mel, npy("ref_mel"));
  EXPECT_EQ(speaker_.bos_token, 151870);
}

TEST_F(Token2WavReferenceTest, SwayGridMatches) {
  const std::vector<float> want = npy("time_points");
  const std::vector<float> got = sway_time_points(static_cast<int>(want.size()), -1.0f);
  EXPECT_LE(max_abs_error(got, want), 1e-7);
}

TEST_F(Token2WavReferenceTest, KaiserFilterMatches) {
  EXPECT_LE(max_abs_error(kaiser_sinc_filter(0.25, 0.3, kAliasFreeTaps), npy("kaiser_filter")), 1e-7);
}

TEST_F(Token2WavReferenceTest, OneDitEvaluationMatches) {
  const Dit& dit = model_->dit();
  const DitConditioning cond = dit.condition(codes_, speaker_.xvector, speaker_.ref_mel, speaker_.ref_frames);
  const float t = npy("dit_time").at(0);
  const Tensor x = tensor_of("dit_input");
  const double both = relative_error(values(dit.forward(cond, x, t)), npy("dit_output"));
  EXPECT_LE(both, 1e-4) << "the DiT's [cond; uncond] output";
  const double guided = relative_error(values(dit.velocity(cond, x, t, 0.5f)), npy("dit_guided"));
  EXPECT_LE(guided, 1e-4) << "the guided ODE function";
}

TEST_F(Token2WavReferenceTest, SampledMelMatches) {
  const std::vector<float> mel = values(model_->mel(codes_, speaker_, tensor_of("noise")));
  EXPECT_LE(relative_error(mel, npy("mel")), 1e-4);
}

TEST_F(Token2WavReferenceTest, WaveformMatches) {
  // BigVGAN on transformers' mel, then the whole stage from the saved noise.
  const std::vector<float> want = npy("waveform");
  const std::vector<float> vocoded = values(model_->bigvgan().synthesize(tensor_of("mel")));
  EXPECT_LE(max_abs_error(vocoded, want), 1e-4);
  const std::vector<float> end_to_end = model_->synthesize(codes_, speaker_, tensor_of("noise"));
  EXPECT_LE(max_abs_error(end_to_end, want), 1e-3);
}

}  // namespace
}  // namespace omni::model::qwen2_5_omni
