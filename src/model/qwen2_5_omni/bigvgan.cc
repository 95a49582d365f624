#include "model/qwen2_5_omni/bigvgan.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "model/tap_major.h"
#include "tensor/ops.h"

namespace omni::model::qwen2_5_omni {

using tensor::DType;
using tensor::Tensor;
namespace ops = tensor::ops;

namespace {

// The decibel floor of the mel mapping and the level subtracted from it.
constexpr double kMinDb = -115.0, kRefDb = 20.0;
// At most this many floats of unfolded input at a time (64 MiB).
constexpr int64_t kUnfoldBudget = int64_t{16} << 20;

}  // namespace

BigVgan::Conv BigVgan::load_conv(const Checkpoint& checkpoint, const std::string& name, int out, int in, int k,
                                 int dilation, int padding, bool bias) const {
  const std::string p = kBigVganPrefix + name;
  Conv c;
  c.weight = tap_major_weight(checkpoint.load_f32(p + ".weight", {out, in, k})).to(device_);
  if (bias) c.bias = checkpoint.load_f32(p + ".bias", {out}).to(device_);
  c.kernel = k;
  c.dilation = dilation;
  c.padding = padding;
  return c;
}

AliasFreeSnakeBeta BigVgan::load_activation(const Checkpoint& checkpoint, const std::string& name, int channels) const {
  const std::string p = kBigVganPrefix + name + ".act.";
  return AliasFreeSnakeBeta(checkpoint.load_f32(p + "alpha", {channels}).to(device_),
                            checkpoint.load_f32(p + "beta", {channels}).to(device_), device_);
}

BigVgan::BigVgan(const Checkpoint& checkpoint, BigVganConfig config, tensor::Device device)
    : config_(std::move(config)), device_(device) {
  const BigVganConfig& c = config_;
  // db = 20 log10(max(exp(mel), 10^(-115/20))) - 20, x = clamp(2 (db + 115) / 115 - 1, -1, 1): the
  // floor maps below -1, so x = clamp(mel * 40 / (115 ln 10) + 2 (115 - 20) / 115 - 1, -1, 1).
  Tensor scale = Tensor::zeros({c.mel_dim, c.mel_dim}, DType::kF32), shift = Tensor::empty({c.mel_dim}, DType::kF32);
  for (int i = 0; i < c.mel_dim; ++i) {
    scale.data<float>()[i * c.mel_dim + i] = static_cast<float>(2.0 * 20.0 / (-kMinDb * std::log(10.0)));
    shift.data<float>()[i] = static_cast<float>(2.0 * (-kMinDb - kRefDb) / -kMinDb - 1.0);
  }
  mel_scale_ = scale.to(device_);
  mel_shift_ = shift.to(device_);

  conv_pre_ = load_conv(checkpoint, "conv_pre", c.upsample_initial_channel, c.mel_dim, 7, 1, 3, true);
  const int stages = static_cast<int>(c.upsample_rates.size());
  for (int s = 0; s < stages; ++s) {
    const int in = c.upsample_initial_channel >> s, out = c.stage_channels(s);
    Upsample u;
    u.stride = c.upsample_rates[s];
    u.kernel = c.upsample_kernel_sizes[s];
    u.padding = (u.kernel - u.stride) / 2;
    const std::string p = std::string(kBigVganPrefix) + "ups." + std::to_string(s) + ".0.";
    u.weight = checkpoint.load_f32(p + "weight", {in, out, u.kernel}).to(device_);
    u.bias = checkpoint.load_f32(p + "bias", {out}).to(device_);
    ups_.push_back(std::move(u));
    for (size_t j = 0; j < c.resblock_kernel_sizes.size(); ++j) {
      const int k = c.resblock_kernel_sizes[j];
      const std::string b = "resblocks." + std::to_string(s * c.resblock_kernel_sizes.size() + j) + ".";
      AmpBlock block;
      for (int i = 0; i < 3; ++i) {
        const int d = c.resblock_dilation_sizes[j][i];
        block.convs1.push_back(
            load_conv(checkpoint, b + "convs1." + std::to_string(i), out, out, k, d, (k * d - d) / 2, true));
        block.convs2.push_back(
            load_conv(checkpoint, b + "convs2." + std::to_string(i), out, out, k, 1, (k - 1) / 2, true));
      }
      for (int a = 0; a < 6; ++a) {
        block.activations.push_back(load_activation(checkpoint, b + "activations." + std::to_string(a), out));
      }
      resblocks_.push_back(std::move(block));
    }
  }
  const int last = c.stage_channels(stages - 1);
  activation_post_.push_back(load_activation(checkpoint, "activation_post", last));
  conv_post_ = load_conv(checkpoint, "conv_post", 1, last, 7, 1, 3, false);
}

Tensor BigVgan::conv(const Conv& c, const Tensor& x) const {
  const int64_t t = x.dim(0), in = x.dim(1);
  const int64_t rows = t + int64_t{2} * c.padding - static_cast<int64_t>(c.dilation) * (c.kernel - 1);
  if (rows < 1) {
    throw_error(ErrorCode::kInvalidArgument, "BigVGAN: {} rows are too few for a kernel of {} with dilation {}", t,
                c.kernel, c.dilation);
  }
  Tensor out = Tensor::empty({rows, c.weight.dim(0)}, DType::kF32, device_);
  const int64_t width = c.kernel * in;
  const int64_t step = std::max<int64_t>(1, kUnfoldBudget / width);
  Tensor unfolded = Tensor::empty({std::min(step, rows), width}, DType::kF32, device_);
  for (int64_t first = 0; first < rows; first += step) {
    const int64_t n = std::min(step, rows - first);
    Tensor u = unfolded.slice_rows(0, n);
    ops::unfold_rows(x, c.kernel, 1, c.dilation, c.padding, ops::RowPadding::kZeros, first, u);
    Tensor o = out.slice_rows(first, first + n);
    ops::linear(u, c.weight, c.bias, o);
  }
  return out;
}

Tensor BigVgan::upsample(const Upsample& u, const Tensor& x) const {
  // PyTorch's ConvTranspose1d keeps positions [padding, (T - 1) s + k - padding) of the full
  // transposed convolution; ops::conv_transpose1d produces [0, T' s), so x gets zero rows behind
  // until T' s reaches the last kept position.
  const int64_t t = x.dim(0), in = x.dim(1), s = u.stride;
  const int64_t length = (t - 1) * s + u.kernel - int64_t{2} * u.padding;
  const int64_t extra = (std::max<int64_t>(0, u.kernel - s - u.padding) + s - 1) / s;
  Tensor padded = Tensor::zeros({t + extra, in}, DType::kF32, device_);
  Tensor front = padded.slice_rows(0, t);
  ops::copy_columns(x, 0, front, 0, in);
  Tensor full = Tensor::empty({(t + extra) * s, u.weight.dim(1)}, DType::kF32, device_);
  ops::conv_transpose1d(padded, u.weight, u.bias, static_cast<int>(s), 0, full);
  return full.slice_rows(u.padding, u.padding + length);
}

Tensor BigVgan::amp_block(const AmpBlock& block, const Tensor& x) const {
  Tensor h = x;
  for (size_t i = 0; i < 3; ++i) {
    Tensor y = conv(block.convs1[i], block.activations[2 * i].apply(h));
    y = conv(block.convs2[i], block.activations[2 * i + 1].apply(y));
    Tensor next = Tensor::empty(h.shape(), DType::kF32, device_);
    ops::add(h, y, next);
    h = next;
  }
  return h;
}

Tensor BigVgan::synthesize(const Tensor& mel) const {
  const BigVganConfig& c = config_;
  if (mel.rank() != 2 || mel.dim(1) != c.mel_dim || mel.dim(0) < 1 || mel.dtype() != DType::kF32) {
    throw_error(ErrorCode::kInvalidArgument, "BigVGAN: the mel must be float32 [frames >= 1, {}]", c.mel_dim);
  }
  const Tensor m = mel.device() == device_ ? mel : mel.to(device_);
  Tensor x = Tensor::empty(m.shape(), DType::kF32, device_);
  ops::linear(m, mel_scale_, mel_shift_, x);
  ops::clamp(x, -1.0f, 1.0f, x);
  x = conv(conv_pre_, x);
  const size_t kernels = c.resblock_kernel_sizes.size();
  for (size_t s = 0; s < ups_.size(); ++s) {
    x = upsample(ups_[s], x);
    Tensor sum = amp_block(resblocks_[s * kernels], x);
    for (size_t j = 1; j < kernels; ++j) ops::add(sum, amp_block(resblocks_[s * kernels + j], x), sum);
    Tensor mean = Tensor::empty({x.dim(1)}, DType::kF32);
    std::fill_n(mean.data<float>(), x.dim(1), 1.0f / static_cast<float>(kernels));
    ops::mul_columns(sum, mean.to(device_), sum);
    x = sum;
  }
  x = conv(conv_post_, activation_post_.front().apply(x));
  ops::clamp(x, -1.0f, 1.0f, x);
  return x.reshape({x.dim(0)});
}

}  // namespace omni::model::qwen2_5_omni
