// Qwen2.5-Omni's token2wav pieces on a random tiny checkpoint (random_checkpoint.h): the config and
// its errors, the speaker dict, the sway grid and the RK4 3/8 rule on ODEs with known solutions, the
// Kaiser-sinc filter against numpy, the anti-aliased SnakeBeta against its definition, the DiT's
// block mask through what each output block depends on, shapes and determinism end to end.
#include "model/qwen2_5_omni/token2wav.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "model/qwen2_5_omni/alias_free_activation.h"
#include "model/qwen2_5_omni/ode_solver.h"
#include "model/qwen2_5_omni/random_checkpoint.h"
#include "support/temp_dir.h"
#include "tensor/ops.h"

namespace omni::model::qwen2_5_omni {
namespace {

using tensor::DType;
using tensor::Tensor;

const std::filesystem::path kPickles = std::filesystem::path(OMNI_SOURCE_DIR) / "tests/data/torch_pickle";

Tensor host(std::vector<float> values, tensor::Shape shape) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

std::vector<float> values(const Tensor& t) {
  const Tensor h = t.to(tensor::Device::cpu());
  return {h.data<float>(), h.data<float>() + h.numel()};
}

// Deterministic values in [-1, 1).
std::vector<float> ramp(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) / 8388608.0f - 1.0f;
  }
  return v;
}

class Token2WavTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new omni::testing::TempDir();
    write_random_token2wav_checkpoint(dir_->path(), tiny_token2wav_config(), 7);
    model_ = Token2Wav::load(dir_->path()).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete dir_;
  }
  static Speaker speaker() {
    const DitConfig& c = model_->config().dit;
    Speaker s;
    s.xvector = ramp(c.enc_emb_dim, 1);
    s.ref_frames = 15;
    s.ref_mel = ramp(s.ref_frames * c.mel_dim, 2);
    return s;
  }
  static std::vector<int32_t> codes(size_t n) {
    std::vector<int32_t> c(n);
    for (size_t i = 0; i < n; ++i) c[i] = static_cast<int32_t>((i * 7 + 3) % 41);
    return c;
  }
  static omni::testing::TempDir* dir_;
  static Token2Wav* model_;
};
omni::testing::TempDir* Token2WavTest::dir_ = nullptr;
Token2Wav* Token2WavTest::model_ = nullptr;

TEST_F(Token2WavTest, ReadsTheConfigItsCheckpointWrites) {
  const Token2WavConfig& c = model_->config();
  EXPECT_EQ(c.dit.hidden_size, 32);
  EXPECT_EQ(c.dit.inner_dim(), 64);
  EXPECT_EQ(c.dit.look_ahead(2), 1);
  EXPECT_EQ(c.dit.look_ahead(1), 0);
  EXPECT_EQ(c.dit.look_backward(0), 1);
  EXPECT_EQ(c.dit.look_backward(3), 1);
  EXPECT_EQ(c.dit.look_backward(2), 0);
  EXPECT_EQ(c.dit.enc_channels, (std::vector<int>{16, 16, 16, 48}));
  EXPECT_FLOAT_EQ(c.dit.rope_theta, 10000.0f);
  EXPECT_EQ(c.bigvgan.hop(), 30);
  EXPECT_EQ(c.bigvgan.stage_channels(2), 4);
  EXPECT_EQ(c.bigvgan.resblock_dilation_sizes[1], (std::vector<int>{1, 3, 5}));
}

TEST(Token2WavConfigTest, DefaultsAreTheReleasedModelAndErrorsNameTheField) {
  const Token2WavConfig released =
      parse_token2wav_config(Json::parse(R"({"token2wav_config": {"dit_config": {"rope_theta": 5000},
                                                                  "bigvgan_config": {}}})"),
                             "config.json");
  EXPECT_EQ(released.dit.num_hidden_layers, 22);
  EXPECT_EQ(released.dit.num_embeds, 8193);
  EXPECT_FLOAT_EQ(released.dit.rope_theta, 5000.0f);  // the flat field of older config.json files
  EXPECT_EQ(released.bigvgan.hop(), 240);
  EXPECT_EQ(released.bigvgan.stage_channels(5), 24);

  auto message = [](const char* json) {
    try {
      parse_token2wav_config(Json::parse(json), "cfg.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(R"({})").find("cfg.json: missing object 'token2wav_config'"), std::string::npos);
  EXPECT_NE(message(R"({"token2wav_config": {"dit_config": {}}})").find("bigvgan_config"), std::string::npos);
  const std::string wrong = message(R"({"token2wav_config": {"dit_config": {"hidden_size": "big"},
                                                              "bigvgan_config": {}}})");
  EXPECT_NE(wrong.find("'token2wav_config.dit_config.hidden_size'"), std::string::npos) << wrong;
  const std::string mismatch = message(R"({"token2wav_config": {"dit_config": {"mel_dim": 20},
                                                                 "bigvgan_config": {}}})");
  EXPECT_NE(mismatch.find("mel_dim"), std::string::npos) << mismatch;
  const std::string layers = message(R"({"token2wav_config": {"dit_config": {"num_hidden_layers": 4},
                                                               "bigvgan_config": {}}})");
  EXPECT_NE(layers.find("look-ahead/look-backward layer 10"), std::string::npos) << layers;
}

TEST(SpeakerDictTest, ReadsSpeakersFromATorchSaveFile) {
  const SpeakerDict dict = SpeakerDict::load(kPickles / "spk_dict.pt", 12, 20);
  EXPECT_EQ(dict.names(), (std::vector<std::string>{"Chelsie", "Ethan"}));
  const Speaker* chelsie = dict.find("chelsie");  // any case
  ASSERT_NE(chelsie, nullptr);
  EXPECT_EQ(chelsie->bos_token, 151870);
  EXPECT_EQ(chelsie->ref_frames, 9);
  ASSERT_EQ(chelsie->xvector.size(), 12u);
  EXPECT_EQ(chelsie->xvector[4], 0.0f);
  EXPECT_FLOAT_EQ(chelsie->ref_mel[1 * 20 + 2], 0.01f * (2 * 9 + 1) + 0.5f);
  EXPECT_EQ(dict.find("Nobody"), nullptr);
  try {
    SpeakerDict::load(kPickles / "spk_dict.pt", 192, 20);
    FAIL() << "no error for a mis-shaped x-vector";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("speaker 'Chelsie': 'cond' has shape [1, 12], expected 192"),
              std::string::npos)
        << e.what();
  }
}

TEST(OdeSolverTest, SwayGridMatchesTorch) {
  // numpy float32: t = linspace(0, 1, 10); t += -1 * (cos(pi / 2 * t) - 1 + t).
  const std::vector<float> want = {0.000000000e+00f, 1.519227028e-02f, 6.030738354e-02f, 1.339746118e-01f,
                                   2.339555621e-01f, 3.572124243e-01f, 5.000000000e-01f, 6.579799652e-01f,
                                   8.263518810e-01f, 1.000000000e+00f};
  const std::vector<float> got = sway_time_points(10, -1.0f);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-7f) << i;
  EXPECT_THROW(sway_time_points(1, -1.0f), Error);
}

TEST(OdeSolverTest, IntegratesCubicsExactlyAndTheExponentialToFourthOrder) {
  // dx/dt = 4 t^3 (+ 0 x): the 3/8 rule is exact for cubics, so x(1) = x(0) + 1 on any grid.
  const std::vector<float> grid = sway_time_points(10, -1.0f);
  const OdeFunction cubic = [](float t, const Tensor& x) {
    Tensor out = Tensor::empty(x.shape(), DType::kF32);
    std::fill_n(out.data<float>(), out.numel(), 4.0f * t * t * t);
    return out;
  };
  const std::vector<float> end = values(integrate_rk4_38(cubic, host({0.5f, -2.0f}, {1, 2}), grid));
  EXPECT_NEAR(end[0], 1.5f, 2e-6f);
  EXPECT_NEAR(end[1], -1.0f, 2e-6f);
  // dx/dt = x from 1: e; the error of 9 steps of at most 0.17 is below 1e-5 (global O(h^4)).
  int calls = 0;
  const OdeFunction grow = [&](float, const Tensor& x) {
    ++calls;
    return x.to(tensor::Device::cpu());
  };
  const Tensor x0 = host({1.0f, 2.0f, -1.0f}, {3});
  const std::vector<float> e = values(integrate_rk4_38(grow, x0, grid));
  EXPECT_EQ(calls, 4 * 9);
  EXPECT_NEAR(e[0], std::exp(1.0f), 1e-5f);
  EXPECT_NEAR(e[1], 2.0f * std::exp(1.0f), 2e-5f);
  EXPECT_NEAR(e[2], -std::exp(1.0f), 1e-5f);
  EXPECT_EQ(values(x0)[0], 1.0f);  // the initial value is left alone
  // One step of h = 1 from t = 0 of dx/dt = x: the rule's polynomial 1 + 1 + 1/2 + 1/6 + 1/24.
  const std::vector<float> one_step = values(integrate_rk4_38(grow, host({1.0f}, {1}), std::vector<float>{0.0f, 1.0f}));
  EXPECT_NEAR(one_step[0], 1.0f + 1.0f + 0.5f + 1.0f / 6 + 1.0f / 24, 1e-6f);
}

TEST(AliasFreeActivationTest, KaiserSincFilterMatchesNumpy) {
  // np.kaiser(12, beta) * np.sinc(0.5 t) * 0.5, t = -5.5 .. 5.5, normalised (beta = 4.6638).
  const std::vector<float> want = {2.028966450e-03f,  9.389463944e-03f,  -2.554346407e-02f, -5.765737548e-02f,
                                   1.285726091e-01f,  4.432098001e-01f,  4.432098001e-01f,  1.285726091e-01f,
                                   -5.765737548e-02f, -2.554346407e-02f, 9.389463944e-03f,  2.028966450e-03f};
  const std::vector<float> got = kaiser_sinc_filter(0.25, 0.3, 12);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-8f) << i;
  EXPECT_THROW(kaiser_sinc_filter(0.7, 0.3, 12), Error);
}

TEST(AliasFreeActivationTest, EqualsItsDefinition) {
  // transformers' TorchActivation1d written out: replicate-pad 5, transposed convolution with
  // stride 2 times 2, crop 15 each side; SnakeBeta; replicate-pad 5 / 6, correlation with stride 2.
  const int64_t t = 9, c = 3;
  const std::vector<float> x = ramp(t * c, 5), alpha = {0.1f, -0.2f, 0.3f}, beta = {0.0f, 0.2f, -0.1f};
  const std::vector<float> f = kaiser_sinc_filter(0.25, 0.3, 12);
  std::vector<double> want(t * c);
  for (int64_t ch = 0; ch < c; ++ch) {
    std::vector<double> xp(t + 10), full(2 * (t + 9) + 12, 0.0), up(2 * t);
    for (int64_t r = 0; r < t + 10; ++r) xp[r] = x[std::clamp<int64_t>(r - 5, 0, t - 1) * c + ch];
    for (int64_t i = 0; i < t + 10; ++i) {
      for (int j = 0; j < 12; ++j) full[2 * i + j] += xp[i] * f[j];
    }
    for (int64_t q = 0; q < 2 * t; ++q) {
      const double v = 2.0 * full[q + 15];
      const double s = std::sin(v * std::exp(double{alpha[ch]}));
      up[q] = v + s * s / (std::exp(double{beta[ch]}) + 1e-9);
    }
    for (int64_t o = 0; o < t; ++o) {
      double sum = 0.0;
      for (int j = 0; j < 12; ++j) sum += f[j] * up[std::clamp<int64_t>(2 * o + j - 5, 0, 2 * t - 1)];
      want[o * c + ch] = sum;
    }
  }
  const AliasFreeSnakeBeta act(host(alpha, {c}), host(beta, {c}), tensor::Device::cpu());
  const std::vector<float> got = values(act.apply(host(x, {t, c})));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

TEST(DitTest, BlockVisibility) {
  EXPECT_TRUE(dit_block_visible(3, 3, 0, 0));
  EXPECT_FALSE(dit_block_visible(3, 2, 0, 0));
  EXPECT_FALSE(dit_block_visible(3, 4, 0, 0));
  EXPECT_TRUE(dit_block_visible(3, 2, 0, 1));
  EXPECT_FALSE(dit_block_visible(3, 1, 0, 1));
  EXPECT_FALSE(dit_block_visible(3, 4, 0, 1));
  EXPECT_TRUE(dit_block_visible(3, 4, 1, 0));
  EXPECT_FALSE(dit_block_visible(3, 5, 1, 0));
}

TEST_F(Token2WavTest, EachOutputBlockSeesOnlyTheBlocksTheMasksReach) {
  // Layers 0 and 3 look one block back, layer 2 one ahead: output block i reads input blocks
  // i - 2 .. i + 1, so a change in block 2 of x moves blocks 1..4 of the output and no other.
  const Dit& dit = model_->dit();
  const Speaker s = speaker();
  const std::vector<int32_t> c = codes(12);  // 24 frames: 6 blocks of 4
  const DitConditioning cond = dit.condition(c, s.xvector, s.ref_mel, s.ref_frames);
  const int64_t mel = dit.config().mel_dim, m = cond.frames;
  ASSERT_EQ(m, 24);
  std::vector<float> x = ramp(m * mel, 9);
  const std::vector<float> base = values(dit.forward(cond, host(x, {m, mel}), 0.4f));
  ASSERT_EQ(base.size(), static_cast<size_t>(2 * m * mel));
  x[9 * mel + 3] += 0.5f;  // frame 9: block 2
  const std::vector<float> moved = values(dit.forward(cond, host(x, {m, mel}), 0.4f));
  for (int64_t branch = 0; branch < 2; ++branch) {
    for (int64_t block = 0; block < 6; ++block) {
      double change = 0.0;
      for (int64_t r = block * 4; r < block * 4 + 4; ++r) {
        for (int64_t k = 0; k < mel; ++k) {
          const size_t i = (branch * m + r) * mel + k;
          change = std::max(change, std::abs(double{moved[i]} - base[i]));
        }
      }
      if (block >= 1 && block <= 4) {
        EXPECT_GT(change, 1e-6) << "branch " << branch << " block " << block;
      } else {
        EXPECT_EQ(change, 0.0) << "branch " << branch << " block " << block;
      }
    }
  }
}

TEST_F(Token2WavTest, GuidanceCombinesTheTwoBranches) {
  const Dit& dit = model_->dit();
  const Speaker s = speaker();
  const DitConditioning cond = dit.condition(codes(5), s.xvector, s.ref_mel, s.ref_frames);
  const int64_t mel = dit.config().mel_dim, m = cond.frames;
  const Tensor x = host(ramp(m * mel, 4), {m, mel});
  const std::vector<float> both = values(dit.forward(cond, x, 0.25f));
  const std::vector<float> guided = values(dit.velocity(cond, x, 0.25f, 0.5f));
  double uncond_differs = 0.0;
  for (int64_t i = 0; i < m * mel; ++i) {
    const float c = both[i], u = both[m * mel + i];
    EXPECT_NEAR(guided[i], c + 0.5f * (c - u), 1e-5f) << i;
    uncond_differs = std::max(uncond_differs, std::abs(double{c} - u));
  }
  EXPECT_GT(uncond_differs, 1e-3);  // the unconditional branch really drops the conditioning
}

TEST_F(Token2WavTest, SynthesisesHopSamplesPerFrameDeterministically) {
  const Speaker s = speaker();
  const std::vector<int32_t> c = codes(7);
  const Tensor noise = model_->seeded_noise(7, 42);
  ASSERT_EQ(noise.shape(), (tensor::Shape{14, 20}));
  EXPECT_EQ(std::memcmp(noise.data<float>(), model_->seeded_noise(7, 42).data<float>(), noise.nbytes()), 0);
  EXPECT_NE(std::memcmp(noise.data<float>(), model_->seeded_noise(7, 43).data<float>(), noise.nbytes()), 0);
  DitSampling fast;
  fast.num_steps = 4;
  const std::vector<float> a = model_->synthesize(c, s, noise, fast);
  const std::vector<float> b = model_->synthesize(c, s, noise, fast);
  ASSERT_EQ(a.size(), 14u * 30);
  EXPECT_EQ(a, b);
  float peak = 0.0f;
  for (const float v : a) {
    EXPECT_LE(std::abs(v), 1.0f);
    peak = std::max(peak, std::abs(v));
  }
  EXPECT_GT(peak, 1e-4f);
  // BigVGAN alone: the waveform of a mel of F frames has F * hop samples.
  const std::vector<float> wave = values(model_->bigvgan().synthesize(host(ramp(3 * 20, 8), {3, 20})));
  EXPECT_EQ(wave.size(), 90u);
}

TEST_F(Token2WavTest, RejectsBadInputsNamingThem) {
  const Dit& dit = model_->dit();
  Speaker s = speaker();
  const std::vector<int32_t> bad = {1, 41};
  try {
    dit.condition(bad, s.xvector, s.ref_mel, s.ref_frames);
    FAIL() << "no error for code 41";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("code 41 at position 1 is outside [0, 40]"), std::string::npos) << e.what();
  }
  s.xvector.pop_back();
  EXPECT_THROW(dit.condition(codes(2), s.xvector, s.ref_mel, s.ref_frames), Error);
  const Speaker ok = speaker();
  const DitConditioning cond = dit.condition(codes(2), ok.xvector, ok.ref_mel, ok.ref_frames);
  EXPECT_THROW(dit.sample(cond, Tensor::zeros({5, 20}, DType::kF32)), Error);
}

}  // namespace
}  // namespace omni::model::qwen2_5_omni
