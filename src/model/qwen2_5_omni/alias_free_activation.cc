#include "model/qwen2_5_omni/alias_free_activation.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "tensor/ops.h"

namespace omni::model::qwen2_5_omni {

using tensor::DType;
using tensor::Tensor;
namespace ops = tensor::ops;

namespace {

// The modified Bessel function of the first kind, order 0 (its power series).
double bessel_i0(double x) {
  double sum = 1.0, term = 1.0;
  const double q = x * x / 4.0;
  for (int k = 1; k < 200 && term > 1e-17 * sum; ++k) {
    term *= q / (static_cast<double>(k) * k);
    sum += term;
  }
  return sum;
}

// Host int32 row ids [n] with ids[r] = clamp(r - shift, 0, rows - 1) (edge padding).
Tensor clamped_ids(int64_t n, int64_t shift, int64_t rows) {
  Tensor ids = Tensor::empty({n}, DType::kI32);
  for (int64_t r = 0; r < n; ++r)
    ids.data<int32_t>()[r] = static_cast<int32_t>(std::clamp<int64_t>(r - shift, 0, rows - 1));
  return ids;
}

// The up-sampler's transposed convolution (pad 5 edge samples each side, stride 2, times the
// ratio 2, crop 15 on each side) reads, for output 2m, taps f[2i + 1] at x[m + 2 - i] and, for
// 2m + 1, taps f[2i] at x[m + 3 - i] (i < 6). Over the input padded by 3 rows in front, a 7-tap
// correlation at row m reads x[m + a - 3]: the even phase is a = 5 - i, the odd one a = 6 - i.
constexpr int kUpTaps = 7, kUpFront = 3;
// The down-sampler pads 5 rows in front and 6 behind (an even filter).
constexpr int kDownFront = kAliasFreeTaps / 2 - 1, kDownBack = kAliasFreeTaps / 2;

}  // namespace

std::vector<float> kaiser_sinc_filter(double cutoff, double half_width, int kernel_size) {
  if (!(cutoff > 0.0 && cutoff <= 0.5) || kernel_size < 2) {
    throw_error(ErrorCode::kInvalidArgument, "kaiser_sinc_filter: cutoff {} must be in (0, 0.5] and {} taps >= 2",
                cutoff, kernel_size);
  }
  const bool even = kernel_size % 2 == 0;
  const int half = kernel_size / 2;
  const double attenuation = 2.285 * (half - 1) * M_PI * (4.0 * half_width) + 7.95;
  double beta = 0.0;
  if (attenuation > 50.0) {
    beta = 0.1102 * (attenuation - 8.7);
  } else if (attenuation >= 21.0) {
    beta = 0.5842 * std::pow(attenuation - 21.0, 0.4) + 0.07886 * (attenuation - 21.0);
  }
  std::vector<double> taps(kernel_size);
  double sum = 0.0;
  const double centre = (kernel_size - 1) / 2.0;
  for (int n = 0; n < kernel_size; ++n) {
    const double r = (n - centre) / centre;
    const double window = bessel_i0(beta * std::sqrt(std::max(0.0, 1.0 - r * r))) / bessel_i0(beta);
    const double t = even ? (n - half) + 0.5 : static_cast<double>(n - half);
    const double x = 2.0 * cutoff * t;
    const double sinc = x == 0.0 ? 1.0 : std::sin(M_PI * x) / (M_PI * x);
    taps[n] = 2.0 * cutoff * window * sinc;
    sum += taps[n];
  }
  std::vector<float> out(kernel_size);
  for (int n = 0; n < kernel_size; ++n) out[n] = static_cast<float>(taps[n] / sum);
  return out;
}

AliasFreeSnakeBeta::AliasFreeSnakeBeta(Tensor alpha, Tensor beta, tensor::Device device)
    : device_(device), alpha_(std::move(alpha)), beta_(std::move(beta)) {
  if (alpha_.rank() != 1 || beta_.rank() != 1 || alpha_.dim(0) != beta_.dim(0)) {
    throw_error(ErrorCode::kInvalidArgument, "AliasFreeSnakeBeta: alpha and beta must be [C] of one length");
  }
  const int64_t c = alpha_.dim(0);
  const std::vector<float> f = kaiser_sinc_filter(0.25, 0.3, kAliasFreeTaps);
  Tensor up = Tensor::zeros({2 * c, 1, kUpTaps}, DType::kF32);
  Tensor down = Tensor::empty({c, 1, kAliasFreeTaps}, DType::kF32);
  for (int64_t ch = 0; ch < c; ++ch) {
    float* even = up.data<float>() + ch * kUpTaps;
    float* odd = up.data<float>() + (c + ch) * kUpTaps;
    for (size_t i = 0; i < kAliasFreeTaps / 2; ++i) {
      even[5 - i] = 2.0f * f[2 * i + 1];
      odd[6 - i] = 2.0f * f[2 * i];
    }
    std::copy(f.begin(), f.end(), down.data<float>() + ch * kAliasFreeTaps);
  }
  up_weight_ = up.to(device_);
  down_weight_ = down.to(device_);
}

Tensor AliasFreeSnakeBeta::apply(const Tensor& x) const {
  const int64_t t = x.dim(0), c = channels();
  if (x.rank() != 2 || x.dim(1) != c || t < 1) {
    throw_error(ErrorCode::kInvalidArgument, "AliasFreeSnakeBeta: the input must be [T >= 1, {}]", c);
  }
  // Up x2: the edge-padded input twice side by side, one depthwise correlation for both phases.
  const int64_t padded = t + kUpTaps - 1;
  Tensor edge = Tensor::empty({padded, c}, DType::kF32, device_);
  ops::embedding(x, clamped_ids(padded, kUpFront, t), edge);
  Tensor twice = Tensor::empty({padded, 2 * c}, DType::kF32, device_);
  ops::copy_columns(edge, 0, twice, 0, c);
  ops::copy_columns(edge, 0, twice, c, c);
  Tensor phases = Tensor::empty({t, 2 * c}, DType::kF32, device_);
  ops::conv1d(twice, up_weight_, Tensor(), 1, static_cast<int>(2 * c), phases);
  Tensor up = phases.reshape({2 * t, c});
  ops::snake_beta(up, alpha_, beta_, up);

  // Low-pass the edge-padded signal at the doubled rate, then keep the even rows.
  const int64_t rows = 2 * t + kDownFront + kDownBack;
  Tensor padded_up = Tensor::empty({rows, c}, DType::kF32, device_);
  ops::embedding(up, clamped_ids(rows, kDownFront, 2 * t), padded_up);
  Tensor filtered = Tensor::empty({2 * t, c}, DType::kF32, device_);
  ops::conv1d(padded_up, down_weight_, Tensor(), 1, static_cast<int>(c), filtered);
  Tensor even = Tensor::empty({t}, DType::kI32);
  for (int64_t r = 0; r < t; ++r) even.data<int32_t>()[r] = static_cast<int32_t>(2 * r);
  Tensor out = Tensor::empty({t, c}, DType::kF32, device_);
  ops::embedding(filtered, even, out);
  return out;
}

}  // namespace omni::model::qwen2_5_omni
