// Tiled VAE decoding (model/z_image/vae_tiling.h) on the tiny checkpoint: the tiling geometry, the
// blends, bit-for-bit equality with the whole decode for latents of one tile, and diffusers' own
// tiled decode (scripts/reference/z_image_vae_tiling_reference.py).
#include "model/z_image/vae_tiling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "model/z_image/config.h"
#include "model/z_image/image_model.h"
#include "tensor/npy.h"

namespace omni::model::z_image {
namespace {

using tensor::DType;
using tensor::Tensor;

const std::filesystem::path kData = std::filesystem::path(OMNI_SOURCE_DIR) / "tests/data/tiny_z_image";
const std::filesystem::path kCheckpoint = kData / "checkpoint";

const VaeDecoder& decoder(bool tiled) {
  static const ZImageConfig config = read_config(kCheckpoint);
  static const VaeDecoder* whole = new VaeDecoder(kCheckpoint, config.vae, {}, false);
  static const VaeDecoder* tiles = new VaeDecoder(kCheckpoint, config.vae, {}, true);
  return tiled ? *tiles : *whole;
}

// LargerLatentsAreCloseToWholeAndDeterministic's smoke bounds, relative to the largest value of the
// whole decode.
constexpr float kTiledVsWholeWorst = 0.4f;  // measured 0.19 (0.43 of 2.27)
constexpr double kTiledVsWholeMean = 0.04;  // measured 0.018

Tensor latents(int64_t h, int64_t w, uint64_t seed) { return seeded_latents({16, h, w}, seed); }

float max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  float worst = 0;
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) {
    worst = std::max(worst, std::abs(a.data<float>()[i] - b.data<float>()[i]));
  }
  return worst;
}

Tensor filled(tensor::Shape shape, float (*value)(int64_t, int64_t, int64_t)) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t y = 0; y < shape[0]; ++y)
    for (int64_t x = 0; x < shape[1]; ++x)
      for (int64_t c = 0; c < shape[2]; ++c) t.data<float>()[(y * shape[1] + x) * shape[2] + c] = value(y, x, c);
  return t;
}

TEST(VaeTiling, ParametersFollowTheConfig) {
  const ZImageConfig config = read_config(kCheckpoint);
  ASSERT_EQ(config.vae.sample_size, 64);
  const VaeTiling t = VaeTiling::of(config.vae.sample_size, config.vae.scale_factor());
  EXPECT_EQ(t.tile_sample_min_size, 64);
  EXPECT_EQ(t.tile_latent_min_size, 16);  // 64 / 2^(3 - 1)
  EXPECT_EQ(t.overlap_size(), 12);
  EXPECT_EQ(t.blend_extent(), 16);
  EXPECT_EQ(t.row_limit(), 48);
  EXPECT_FALSE(t.applies(16, 16));
  EXPECT_TRUE(t.applies(17, 16));
  EXPECT_TRUE(t.applies(16, 17));
  // The released FLUX.1 VAE: sample_size 1024, 4 blocks.
  const VaeTiling flux = VaeTiling::of(1024, 8);
  EXPECT_EQ(flux.tile_latent_min_size, 128);
  EXPECT_EQ(flux.overlap_size(), 96);
  EXPECT_EQ(flux.blend_extent(), 256);
  EXPECT_EQ(flux.row_limit(), 768);
}

TEST(VaeTiling, RefusesASampleSizeItCannotTile) {
  try {
    VaeTiling::of(0, 8);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("sample_size"), std::string::npos) << e.what();
  }
  EXPECT_THROW(VaeTiling::of(4, 8), Error);
}

TEST(VaeTiling, BlendsAreLinearRamps) {
  // a: 6 rows of value 10 + y, b: 4 rows of value -1; over extent 4 rows.
  const Tensor a = filled({6, 3, 2}, [](int64_t y, int64_t, int64_t) { return 10.0f + static_cast<float>(y); });
  Tensor b = filled({4, 3, 2}, [](int64_t, int64_t, int64_t) { return -1.0f; });
  blend_v(a, b, 8);  // min(6, 4, 8) = 4 rows
  for (int64_t y = 0; y < 4; ++y) {
    const float wa = static_cast<float>(1.0 - y / 4.0), wb = static_cast<float>(y / 4.0);
    const float want = (10.0f + static_cast<float>(2 + y)) * wa + -1.0f * wb;
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(b.data<float>()[y * 6 + i], want) << y;
  }
  // Columns: a 5 wide with value x, b 3 wide of 7; extent 2 blends columns 0 and 1 only.
  const Tensor l = filled({2, 5, 1}, [](int64_t, int64_t x, int64_t) { return static_cast<float>(x); });
  Tensor r = filled({2, 3, 1}, [](int64_t, int64_t, int64_t) { return 7.0f; });
  blend_h(l, r, 2);
  for (int64_t y = 0; y < 2; ++y) {
    EXPECT_EQ(r.data<float>()[y * 3 + 0], 3.0f);                // all from a's column 3
    EXPECT_EQ(r.data<float>()[y * 3 + 1], 4.0f * 0.5f + 3.5f);  // half of a's column 4, half of 7
    EXPECT_EQ(r.data<float>()[y * 3 + 2], 7.0f);
  }
  Tensor narrow = filled({3, 3, 2}, [](int64_t, int64_t, int64_t) { return 0.0f; });
  EXPECT_THROW(blend_v(a.reshape({6, 2, 3}), narrow, 4), Error);
}

// A decoder that is pointwise in the latents (every latent pixel becomes an f x f block of its
// channel-0 value) decodes the same pixels in every tile that covers them, so the tiled image is
// the whole one wherever the tiles put their pixels: this checks where each kept tile lands.
TEST(VaeTiling, TilesLandWhereTheyBelong) {
  const VaeTiling t = VaeTiling::of(64, 4);
  const auto pointwise = [](const Tensor& z) {
    Tensor out = Tensor::empty({z.dim(0) * 4, z.dim(1) * 4, 3}, DType::kF32);
    for (int64_t y = 0; y < out.dim(0); ++y)
      for (int64_t x = 0; x < out.dim(1); ++x)
        for (int64_t c = 0; c < 3; ++c)
          out.data<float>()[(y * out.dim(1) + x) * 3 + c] =
              z.data<float>()[((y / 4) * z.dim(1) + x / 4) * z.dim(2)] + static_cast<float>(c);
    return out;
  };
  for (const auto& [h, w] : {std::pair<int64_t, int64_t>{40, 28}, {17, 16}, {16, 50}, {37, 37}}) {
    Tensor z = Tensor::empty({h, w, 2}, DType::kF32);
    for (int64_t i = 0; i < z.numel(); ++i) z.data<float>()[i] = static_cast<float>(i % 97) * 0.25f;
    const Tensor tiled = tiled_decode(z, t, pointwise);
    const Tensor whole = pointwise(z);
    ASSERT_EQ(tiled.shape(), whole.shape()) << h << "x" << w;
    EXPECT_LE(max_abs_diff(tiled, whole), 1e-5f) << h << "x" << w;
  }
}

TEST(VaeTiling, OneTileDecodesBitForBitAsWhole) {
  for (const auto& [h, w] : {std::pair<int64_t, int64_t>{16, 16}, {12, 16}, {16, 8}}) {
    const Tensor z = latents(h, w, 5);
    const Tensor tiled = decoder(true).decode(z);
    const Tensor whole = decoder(false).decode(z);
    ASSERT_EQ(tiled.shape(), whole.shape());
    EXPECT_EQ(std::memcmp(tiled.raw(), whole.raw(), tiled.nbytes()), 0) << h << "x" << w;
  }
}

TEST(VaeTiling, LargerLatentsAreCloseToWholeAndDeterministic) {
  const Tensor z = latents(40, 28, 7);
  const Tensor tiled = decoder(true).decode(z);
  const Tensor again = decoder(true).decode(z);
  const Tensor whole = decoder(false).decode(z);
  ASSERT_EQ(tiled.shape(), (tensor::Shape{160, 112, 3}));
  EXPECT_EQ(std::memcmp(tiled.raw(), again.raw(), tiled.nbytes()), 0);
  // Each tile sees only its own latents (the mid-block attention is global), so the images differ,
  // but they are the same picture: smoke bounds on the worst and the mean difference against the
  // range of the whole decode.
  float range = 0;
  double mean = 0;
  for (int64_t i = 0; i < whole.numel(); ++i) {
    range = std::max(range, std::abs(whole.data<float>()[i]));
    mean += std::abs(tiled.data<float>()[i] - whole.data<float>()[i]);
  }
  mean /= static_cast<double>(whole.numel());
  const float worst = max_abs_diff(tiled, whole);
  ::testing::Test::RecordProperty("tiled_vs_whole_max_abs_diff", std::to_string(worst));
  ::testing::Test::RecordProperty("tiled_vs_whole_mean_abs_diff", std::to_string(mean));
  ::testing::Test::RecordProperty("whole_max_abs", std::to_string(range));
  EXPECT_GT(worst, 0.0f);
  EXPECT_LT(worst, kTiledVsWholeWorst * range);
  EXPECT_LT(mean, kTiledVsWholeMean * range);
}

// diffusers' vae.enable_tiling() decode of the same latents.
TEST(VaeTiling, MatchesDiffusersTiledDecode) {
  const auto image_file = kData / "tiled_image.npy";
  if (!std::filesystem::exists(image_file)) {
    GTEST_SKIP() << "no diffusers reference: run scripts/reference/z_image_vae_tiling_reference.py --diffusers "
                    "DIFFUSERS_SRC --model tests/data/tiny_z_image/checkpoint --out tests/data/tiny_z_image "
                    "(tests/data/tiny_z_image/README.md)";
  }
  const Tensor batched = tensor::load_npy(kData / "tiled_latents.npy");
  ASSERT_EQ(batched.shape(), (tensor::Shape{1, 16, 40, 28}));
  const Tensor z = batched.reshape({16, 40, 28});
  const Tensor decoded = decoder(true).decode(z);
  const Tensor want_decoded = tensor::load_npy(kData / "tiled_decoded.npy");
  ASSERT_EQ(decoded.shape(), want_decoded.shape());
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < decoded.numel(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(decoded.data<float>()[i]) - want_decoded.data<float>()[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want_decoded.data<float>()[i])));
  }
  ::testing::Test::RecordProperty("tiled_decoded_relative_error", std::to_string(diff / scale));
  EXPECT_LE(diff / scale, 1e-4);

  const auto worst_pixel = [](const RgbImage& got, const Tensor& want) {
    EXPECT_EQ(static_cast<int64_t>(got.pixels.size()), want.numel());
    int worst = 0;
    for (int64_t i = 0; i < want.numel(); ++i)
      worst = std::max(worst, std::abs(got.pixels[i] - want.data<int32_t>()[i]));
    return worst;
  };
  EXPECT_LE(worst_pixel(ImageModel::to_rgb(decoded), tensor::load_npy(image_file)), 1);
  EXPECT_LE(
      worst_pixel(ImageModel::to_rgb(decoder(false).decode(z)), tensor::load_npy(kData / "tiled_untiled_image.npy")),
      1);
}

}  // namespace
}  // namespace omni::model::z_image
