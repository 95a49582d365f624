// The image ops of tensor/ops.h (conv2d, group_norm, silu, upsample_nearest2x, attention,
// rotate_pairs, mul_columns) on the CPU against float64 loops written from their definitions, and
// their argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/error.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace omni::tensor {
namespace {

Tensor random_tensor(Shape shape, uint32_t seed, float scale = 1.0f) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  uint32_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.data<float>()[i] = scale * (static_cast<float>(s >> 8) / 16777216.0f * 2.0f - 1.0f);
  }
  return t;
}

void expect_near_all(const Tensor& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got.data<float>()[i], want[i], tol) << "element " << i;
}

TEST(ImageOpsTest, Conv2dMatchesTheDefinition) {
  const int64_t h = 5, w = 7, cin = 3, cout = 4, k = 3, pad = 1;
  const Tensor x = random_tensor({h, w, cin}, 1), weight = random_tensor({cout, cin, k, k}, 2), bias = random_tensor({cout}, 3);
  for (int stride : {1, 2}) {
    SCOPED_TRACE("stride " + std::to_string(stride));
    const int64_t oh = (h + 2 * pad - k) / stride + 1, ow = (w + 2 * pad - k) / stride + 1;
    Tensor out = Tensor::empty({oh, ow, cout}, DType::kF32);
    ops::conv2d(x, weight, bias, pad, stride, out);
    std::vector<double> want;
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t xx = 0; xx < ow; ++xx)
        for (int64_t o = 0; o < cout; ++o) {
          double acc = bias.data<float>()[o];
          for (int64_t c = 0; c < cin; ++c)
            for (int64_t ky = 0; ky < k; ++ky)
              for (int64_t kx = 0; kx < k; ++kx) {
                const int64_t iy = y * stride + ky - pad, ix = xx * stride + kx - pad;
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                acc += static_cast<double>(weight.data<float>()[((o * cin + c) * k + ky) * k + kx]) *
                       x.data<float>()[(iy * w + ix) * cin + c];
              }
          want.push_back(acc);
        }
    expect_near_all(out, want, 1e-5);
    Tensor wrong = Tensor::empty({oh, ow, cout + 1}, DType::kF32);
    EXPECT_THROW(ops::conv2d(x, weight, bias, pad, stride, wrong), Error);
  }
  Tensor out = Tensor::empty({h, w, cout}, DType::kF32);
  EXPECT_THROW(ops::conv2d(x, weight, bias, pad, 0, out), Error);
}

TEST(ImageOpsTest, GroupNormSiluUpsampleMulColumns) {
  const int64_t n = 6, c = 8, groups = 4;
  const Tensor x = random_tensor({n, c}, 4, 3.0f), weight = random_tensor({c}, 5), bias = random_tensor({c}, 6);
  Tensor out = Tensor::empty({n, c}, DType::kF32);
  ops::group_norm(x, groups, weight, bias, 1e-6f, out);
  std::vector<double> want(static_cast<size_t>(n * c));
  for (int64_t g = 0; g < groups; ++g) {
    double sum = 0, sq = 0;
    const int64_t per = c / groups;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t ch = g * per; ch < (g + 1) * per; ++ch) sum += x.data<float>()[p * c + ch];
    const double mean = sum / (n * per);
    for (int64_t p = 0; p < n; ++p)
      for (int64_t ch = g * per; ch < (g + 1) * per; ++ch) sq += std::pow(x.data<float>()[p * c + ch] - mean, 2);
    const double inv = 1.0 / std::sqrt(sq / (n * per) + 1e-6);
    for (int64_t p = 0; p < n; ++p)
      for (int64_t ch = g * per; ch < (g + 1) * per; ++ch)
        want[p * c + ch] = (x.data<float>()[p * c + ch] - mean) * inv * weight.data<float>()[ch] + bias.data<float>()[ch];
  }
  expect_near_all(out, want, 1e-5);
  EXPECT_THROW(ops::group_norm(x, 3, weight, bias, 1e-6f, out), Error);

  Tensor s = Tensor::empty({n, c}, DType::kF32);
  ops::silu(x, s);
  for (int64_t i = 0; i < x.numel(); ++i) want[i] = x.data<float>()[i] / (1.0 + std::exp(-x.data<float>()[i]));
  expect_near_all(s, want, 1e-6);

  const Tensor img = random_tensor({2, 3, 2}, 7);
  Tensor up = Tensor::empty({4, 6, 2}, DType::kF32);
  ops::upsample_nearest2x(img, up);
  for (int64_t y = 0; y < 4; ++y)
    for (int64_t xx = 0; xx < 6; ++xx)
      for (int64_t ch = 0; ch < 2; ++ch)
        EXPECT_EQ(up.data<float>()[(y * 6 + xx) * 2 + ch], img.data<float>()[((y / 2) * 3 + xx / 2) * 2 + ch]);

  Tensor m = Tensor::empty({n, c}, DType::kF32);
  ops::mul_columns(x, weight, m);
  for (int64_t i = 0; i < x.numel(); ++i) want[i] = static_cast<double>(x.data<float>()[i]) * weight.data<float>()[i % c];
  expect_near_all(m, want, 1e-6);
}

TEST(ImageOpsTest, AttentionAndRotatePairs) {
  const int64_t s = 5, skv = 7, heads = 2, d = 4;
  const Tensor q = random_tensor({s, heads, d}, 8), k = random_tensor({skv, heads, d}, 9), v = random_tensor({skv, heads, d}, 10);
  Tensor out = Tensor::empty({s, heads, d}, DType::kF32);
  const float scale = 0.5f;
  ops::attention(q, k, v, scale, out);
  std::vector<double> want;
  for (int64_t i = 0; i < s; ++i)
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<double> p(skv);
      double mx = -1e300, total = 0;
      for (int64_t j = 0; j < skv; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < d; ++e) dot += static_cast<double>(q.data<float>()[(i * heads + h) * d + e]) * k.data<float>()[(j * heads + h) * d + e];
        p[j] = dot * scale;
        mx = std::max(mx, p[j]);
      }
      for (double& x : p) total += (x = std::exp(x - mx));
      for (int64_t e = 0; e < d; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < skv; ++j) acc += p[j] / total * v.data<float>()[(j * heads + h) * d + e];
        want.push_back(acc);
      }
    }
  expect_near_all(out, want, 1e-5);
  EXPECT_THROW(ops::attention(q, k, v, scale, const_cast<Tensor&>(q)), Error);

  Tensor x = random_tensor({3, heads, d}, 11);
  const Tensor before = random_tensor({3, heads, d}, 11);
  Tensor cos = Tensor::empty({3, d / 2}, DType::kF32), sin = Tensor::empty({3, d / 2}, DType::kF32);
  for (int64_t i = 0; i < 3 * d / 2; ++i) {
    cos.data<float>()[i] = std::cos(0.3f * i);
    sin.data<float>()[i] = std::sin(0.3f * i);
  }
  ops::rotate_pairs(x, cos, sin);
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t j = 0; j < d / 2; ++j) {
        const double re = before.data<float>()[(t * heads + h) * d + 2 * j], im = before.data<float>()[(t * heads + h) * d + 2 * j + 1];
        const double c = cos.data<float>()[t * d / 2 + j], sn = sin.data<float>()[t * d / 2 + j];
        EXPECT_NEAR(x.data<float>()[(t * heads + h) * d + 2 * j], re * c - im * sn, 1e-6);
        EXPECT_NEAR(x.data<float>()[(t * heads + h) * d + 2 * j + 1], re * sn + im * c, 1e-6);
      }
}

}  // namespace
}  // namespace omni::tensor
