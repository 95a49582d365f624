// The audio encoders' ops of tensor/ops.h (elu, sigmoid, unfold_rows, copy_columns,
// weighted_mean_std, nearest_codes): on the CPU against values written out by hand or computed here
// in float64, their argument errors; and on CUDA (skipped, saying why, where no GPU is visible)
// against the CPU: elementwise within float32 rounding, the copies exact, the float64 pooling and the
// quantizer's codes and residuals equal to the CPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace omni::tensor {
namespace {

Tensor host(Shape shape, const std::vector<float>& values) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  EXPECT_EQ(static_cast<size_t>(t.numel()), values.size());
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

Tensor random(Shape shape, uint32_t seed, float scale = 1.0f) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  uint32_t s = seed * 2654435761u + 11;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.data<float>()[i] = scale * (static_cast<float>(s >> 8) / 16777216.0f * 2.0f - 1.0f);
  }
  return t;
}

std::vector<float> values(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
}

TEST(AudioEncoderOps, EluAndSigmoid) {
  const Tensor x = host({4}, {-2.0f, -1e-3f, 0.0f, 1.5f});
  Tensor out = Tensor::empty({4}, DType::kF32);
  ops::elu(x, out);
  EXPECT_FLOAT_EQ(out.data<float>()[0], std::expm1(-2.0f));
  EXPECT_FLOAT_EQ(out.data<float>()[1], std::expm1(-1e-3f));  // expm1, not exp - 1
  EXPECT_EQ(out.data<float>()[2], 0.0f);
  EXPECT_EQ(out.data<float>()[3], 1.5f);
  ops::sigmoid(x, out);
  EXPECT_FLOAT_EQ(out.data<float>()[0], 1.0f / (1.0f + std::exp(2.0f)));
  EXPECT_EQ(out.data<float>()[2], 0.5f);
  EXPECT_FLOAT_EQ(out.data<float>()[3], 1.0f / (1.0f + std::exp(-1.5f)));
}

// x has rows 0..4 of 2 channels: row i = (10 i, 10 i + 1).
Tensor five_rows() { return host({5, 2}, {0, 1, 10, 11, 20, 21, 30, 31, 40, 41}); }

TEST(AudioEncoderOps, UnfoldRowsPadsWithZerosEdgesOrReflection) {
  // kernel 3, stride 2, dilation 1, left 2: output r reads rows 2r - 2, 2r - 1, 2r.
  Tensor out = Tensor::empty({3, 6}, DType::kF32);
  ops::unfold_rows(five_rows(), 3, 2, 1, 2, ops::RowPadding::kZeros, 0, out);
  EXPECT_EQ(values(out), (std::vector<float>{0, 0, 0, 0, 0, 1, 0, 1, 10, 11, 20, 21, 20, 21, 30, 31, 40, 41}));
  ops::unfold_rows(five_rows(), 3, 2, 1, 2, ops::RowPadding::kReplicate, 0, out);
  EXPECT_EQ(values(out), (std::vector<float>{0, 1, 0, 1, 0, 1, 0, 1, 10, 11, 20, 21, 20, 21, 30, 31, 40, 41}));
  // kernel 3, dilation 2, left 2 ("same"): output r reads rows r - 2, r, r + 2; rows -2, -1, 5, 6
  // reflect to 2, 1, 3, 2.
  Tensor same = Tensor::empty({5, 6}, DType::kF32);
  ops::unfold_rows(five_rows(), 3, 1, 2, 2, ops::RowPadding::kReflect, 0, same);
  EXPECT_EQ(values(same), (std::vector<float>{20, 21, 0,  1,  20, 21, 10, 11, 10, 11, 30, 31, 0,  1,  20,
                                              21, 40, 41, 10, 11, 30, 31, 30, 31, 20, 21, 40, 41, 20, 21}));
  // `first` skips output rows: rows 3 and 4 of the same unfolding.
  Tensor tail = Tensor::empty({2, 6}, DType::kF32);
  ops::unfold_rows(five_rows(), 3, 1, 2, 2, ops::RowPadding::kReflect, 3, tail);
  const std::vector<float> all = values(same);
  EXPECT_EQ(values(tail), std::vector<float>(all.begin() + 18, all.end()));
}

TEST(AudioEncoderOps, UnfoldRowsRejectsTooShortInputsForReflection) {
  Tensor out = Tensor::empty({5, 10}, DType::kF32);
  // left 5 reflects row -5 of 5 rows: nothing to mirror it onto.
  try {
    ops::unfold_rows(five_rows(), 5, 1, 2, 5, ops::RowPadding::kReflect, 0, out);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unfold_rows: x has 5 rows, too few to reflect"), std::string::npos)
        << e.what();
  }
  Tensor wrong = Tensor::empty({5, 7}, DType::kF32);
  EXPECT_THROW(ops::unfold_rows(five_rows(), 3, 1, 1, 1, ops::RowPadding::kZeros, 0, wrong), Error);
  EXPECT_THROW(ops::unfold_rows(five_rows(), 0, 1, 1, 1, ops::RowPadding::kZeros, 0, out), Error);
}

TEST(AudioEncoderOps, CopyColumnsMovesOneColumnRange) {
  const Tensor src = host({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor dst = Tensor::zeros({2, 4}, DType::kF32);
  ops::copy_columns(src, 1, dst, 2, 2);
  EXPECT_EQ(values(dst), (std::vector<float>{0, 0, 2, 3, 0, 0, 5, 6}));
  try {
    ops::copy_columns(src, 2, dst, 0, 2);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("columns [2, 4) of src [2, 3]"), std::string::npos) << e.what();
  }
}

TEST(AudioEncoderOps, WeightedMeanStdIsTheSoftmaxWeightedMoments) {
  const Tensor x = random({7, 3}, 1, 2.0f), logits = random({7, 3}, 2, 3.0f);
  Tensor out = Tensor::empty({2, 3}, DType::kF32);
  for (bool weighted : {false, true}) {
    ops::weighted_mean_std(x, weighted ? logits : Tensor(), out);
    for (int c = 0; c < 3; ++c) {
      std::vector<double> w(7, 1.0 / 7);
      if (weighted) {
        double z = 0;
        for (int t = 0; t < 7; ++t) z += w[t] = std::exp(double{logits.data<float>()[t * 3 + c]});
        for (double& v : w) v /= z;
      }
      double mean = 0, var = 0;
      for (int t = 0; t < 7; ++t) mean += w[t] * x.data<float>()[t * 3 + c];
      for (int t = 0; t < 7; ++t) var += w[t] * std::pow(x.data<float>()[t * 3 + c] - mean, 2);
      EXPECT_NEAR(out.data<float>()[c], mean, 1e-6) << c;
      EXPECT_NEAR(out.data<float>()[3 + c], std::sqrt(var), 1e-6) << c;
    }
  }
  // One row: the standard deviation is floored at sqrt(1e-12).
  Tensor one = Tensor::empty({2, 3}, DType::kF32);
  ops::weighted_mean_std(x.slice_rows(0, 1), Tensor(), one);
  EXPECT_FLOAT_EQ(one.data<float>()[3], 1e-6f);
}

// The dots and norms nearest_codes takes, computed on the host.
void rank_inputs(const Tensor& residual, const Tensor& codebook, Tensor& dots, Tensor& norms) {
  ops::linear(residual, codebook, Tensor(), dots);
  for (int64_t n = 0; n < codebook.dim(0); ++n) {
    double s = 0;
    for (int64_t d = 0; d < codebook.dim(1); ++d)
      s += std::pow(double{codebook.data<float>()[n * codebook.dim(1) + d]}, 2);
    norms.data<float>()[n] = static_cast<float>(s);
  }
}

TEST(AudioEncoderOps, NearestCodesPicksTheNearestEntryAndSubtractsIt) {
  // Entries 0 and 2 are equally near frame 0 (a tie: the lower index), entry 1 is nearest frame 1.
  const Tensor codebook = host({3, 2}, {1, 0, 0, 5, -1, 0});
  Tensor residual = host({2, 2}, {0, 0.5f, 0.25f, 4});
  Tensor dots = Tensor::empty({2, 3}, DType::kF32), norms = Tensor::empty({3}, DType::kF32);
  rank_inputs(residual, codebook, dots, norms);
  Tensor codes = Tensor::zeros({2, 2}, DType::kI32);
  ops::nearest_codes(residual, codebook, norms, dots, codes, 1);
  EXPECT_EQ(codes.data<int32_t>()[1], 0);
  EXPECT_EQ(codes.data<int32_t>()[3], 1);
  EXPECT_EQ(codes.data<int32_t>()[0], 0);  // other columns untouched
  EXPECT_EQ(values(residual), (std::vector<float>{-1, 0.5f, 0.25f, -1}));
  Tensor narrow = Tensor::zeros({2, 1}, DType::kI32);
  EXPECT_THROW(ops::nearest_codes(residual, codebook, norms, dots, narrow, 1), Error);
}

TEST(AudioEncoderOps, NearestCodesIsTheExhaustiveSearch) {
  const Tensor codebook = random({64, 16}, 3);
  Tensor residual = random({9, 16}, 4);
  const Tensor start = residual.to(Device::cpu());
  Tensor dots = Tensor::empty({9, 64}, DType::kF32), norms = Tensor::empty({64}, DType::kF32);
  rank_inputs(residual, codebook, dots, norms);
  Tensor codes = Tensor::empty({9, 1}, DType::kI32);
  ops::nearest_codes(residual, codebook, norms, dots, codes, 0);
  for (int f = 0; f < 9; ++f) {
    int best = -1;
    double best_distance = INFINITY;
    for (int n = 0; n < 64; ++n) {
      double d = 0;
      for (int i = 0; i < 16; ++i)
        d += std::pow(double{start.data<float>()[f * 16 + i]} - codebook.data<float>()[n * 16 + i], 2);
      if (d < best_distance) best_distance = d, best = n;
    }
    EXPECT_EQ(codes.data<int32_t>()[f], best) << f;
  }
}

#define SKIP_WITHOUT_GPU()                                                                                   \
  if (compiled_backends().find("cuda") == std::string::npos) GTEST_SKIP() << "no CUDA backend in the build"; \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process"

double max_relative(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff = std::max(diff, std::abs(double{got[i]} - want[i]));
    scale = std::max(scale, std::abs(double{want[i]}));
  }
  return scale > 0 ? diff / scale : diff;
}

TEST(AudioEncoderOpsCuda, MatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  const Tensor x = random({301, 40}, 5, 3.0f);
  for (auto op : {ops::elu, ops::sigmoid}) {
    Tensor a = Tensor::empty(x.shape(), DType::kF32), b = Tensor::empty(x.shape(), DType::kF32, gpu);
    op(x, a);
    op(x.to(gpu), b);
    EXPECT_LE(max_relative(values(b), values(a)), 1e-6);
  }
  for (auto padding : {ops::RowPadding::kZeros, ops::RowPadding::kReplicate, ops::RowPadding::kReflect}) {
    Tensor a = Tensor::empty({150, 200}, DType::kF32), b = Tensor::empty({150, 200}, DType::kF32, gpu);
    ops::unfold_rows(x, 5, 2, 3, 6, padding, 1, a);
    ops::unfold_rows(x.to(gpu), 5, 2, 3, 6, padding, 1, b);
    EXPECT_EQ(values(b), values(a));
  }
  Tensor a = Tensor::zeros({301, 64}, DType::kF32), b = Tensor::zeros({301, 64}, DType::kF32, gpu);
  ops::copy_columns(x, 7, a, 20, 30);
  ops::copy_columns(x.to(gpu), 7, b, 20, 30);
  EXPECT_EQ(values(b), values(a));

  const Tensor logits = random({301, 40}, 6, 4.0f);
  for (bool weighted : {false, true}) {
    Tensor pa = Tensor::empty({2, 40}, DType::kF32), pb = Tensor::empty({2, 40}, DType::kF32, gpu);
    ops::weighted_mean_std(x, weighted ? logits : Tensor(), pa);
    ops::weighted_mean_std(x.to(gpu), weighted ? logits.to(gpu) : Tensor(), pb);
    EXPECT_EQ(values(pb), values(pa)) << weighted;
  }

  // Several quantizers in turn, as an encoder runs them: the same codes and residuals.
  const Tensor codebook = random({2048, 256}, 7);
  Tensor norms = Tensor::empty({2048}, DType::kF32);
  Tensor ra = random({37, 256}, 8, 2.0f), rb = ra.to(gpu);
  Tensor dots_a = Tensor::empty({37, 2048}, DType::kF32), dots_b = Tensor::empty({37, 2048}, DType::kF32, gpu);
  rank_inputs(ra, codebook, dots_a, norms);
  const Tensor codebook_gpu = codebook.to(gpu), norms_gpu = norms.to(gpu);
  Tensor ca = Tensor::empty({37, 4}, DType::kI32), cb = Tensor::empty({37, 4}, DType::kI32, gpu);
  for (int q = 0; q < 4; ++q) {
    ops::linear(ra, codebook, Tensor(), dots_a);
    ops::linear(rb, codebook_gpu, Tensor(), dots_b);
    ops::nearest_codes(ra, codebook, norms, dots_a, ca, q);
    ops::nearest_codes(rb, codebook_gpu, norms_gpu, dots_b, cb, q);
  }
  const Tensor codes_b = cb.to(Device::cpu());
  EXPECT_EQ(std::vector<int32_t>(codes_b.data<int32_t>(), codes_b.data<int32_t>() + 148),
            std::vector<int32_t>(ca.data<int32_t>(), ca.data<int32_t>() + 148));
  EXPECT_EQ(values(rb), values(ra));
}

}  // namespace
}  // namespace omni::tensor
