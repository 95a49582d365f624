#include "model/qwen3_tts/speaker_encoder.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "base/error.h"
#include "model/mel_spectrogram.h"
#include "model/tap_major.h"
#include "tensor/ops.h"

namespace omni::model::qwen3_tts {

using tensor::DType;
using tensor::Tensor;
namespace ops = tensor::ops;

SpeakerEncoder::Conv SpeakerEncoder::load_conv(const Checkpoint& checkpoint, const std::string& name, int out, int in,
                                               int k, int dilation) const {
  const std::string prefix = prefix_ + name;
  return Conv{tap_major_weight(checkpoint.load_f32(prefix + ".weight", {out, in, k})).to(device_),
              checkpoint.load_f32(prefix + ".bias", {out}).to(device_), k, dilation};
}

SpeakerEncoder::SpeakerEncoder(const Checkpoint& checkpoint, SpeakerEncoderConfig config, tensor::Device device,
                               std::string prefix)
    : config_(std::move(config)), device_(device), prefix_(std::move(prefix)) {
  const SpeakerEncoderConfig& c = config_;
  mel_filterbank_ = slaney_mel_filterbank(c.sample_rate, kSpeakerMelFft, c.mel_dim, 0.0,
                                          std::min(kSpeakerMelFmax, c.sample_rate / 2.0));
  const size_t n = c.channels.size();
  first_ = load_conv(checkpoint, "blocks.0.conv", c.channels[0], c.mel_dim, c.kernel_sizes[0], c.dilations[0]);
  int mfa_in = 0;
  for (size_t i = 1; i + 1 < n; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    const int ch = c.channels[i], chunk = ch / c.res2net_scale;
    SeRes2NetBlock block;
    block.tdnn1 = load_conv(checkpoint, b + "tdnn1.conv", ch, c.channels[i - 1], 1, 1);
    for (int j = 0; j + 1 < c.res2net_scale; ++j) {
      block.res2net.push_back(load_conv(checkpoint, b + "res2net_block.blocks." + std::to_string(j) + ".conv", chunk,
                                        chunk, c.kernel_sizes[i], c.dilations[i]));
    }
    block.tdnn2 = load_conv(checkpoint, b + "tdnn2.conv", ch, ch, 1, 1);
    block.se1 = load_conv(checkpoint, b + "se_block.conv1", c.se_channels, ch, 1, 1);
    block.se2 = load_conv(checkpoint, b + "se_block.conv2", ch, c.se_channels, 1, 1);
    blocks_.push_back(std::move(block));
    mfa_in += ch;
  }
  const int last = c.channels.back();
  mfa_ = load_conv(checkpoint, "mfa.conv", last, mfa_in, c.kernel_sizes.back(), c.dilations.back());
  const Conv asp_tdnn = load_conv(checkpoint, "asp.tdnn.conv", c.attention_channels, last * 3, 1, 1);
  const Tensor w = asp_tdnn.weight.to(tensor::Device::cpu());
  Tensor wx = Tensor::empty({c.attention_channels, last}, DType::kF32);
  Tensor wstats = Tensor::empty({c.attention_channels, 2 * static_cast<int64_t>(last)}, DType::kF32);
  for (int64_t a = 0; a < c.attention_channels; ++a) {
    const float* row = w.data<float>() + a * 3 * last;
    std::copy_n(row, last, wx.data<float>() + a * last);
    std::copy_n(row + last, 2 * last, wstats.data<float>() + a * 2 * last);
  }
  asp_tdnn_x_ = Conv{wx.to(device_), Tensor(), 1, 1};
  asp_tdnn_stats_ = Conv{wstats.to(device_), asp_tdnn.bias, 1, 1};
  asp_conv_ = load_conv(checkpoint, "asp.conv", last, c.attention_channels, 1, 1);
  fc_ = load_conv(checkpoint, "fc", c.enc_dim, last * 2, 1, 1);
}

std::vector<float> SpeakerEncoder::mel(std::span<const float> samples) const {
  if (static_cast<int64_t>(samples.size()) < kSpeakerMelMinSamples) {
    throw_error(ErrorCode::kInvalidArgument,
                "the reference audio has {} samples; the speaker encoder needs at least {}", samples.size(),
                kSpeakerMelMinSamples);
  }
  const std::vector<float> padded = reflect_pad(samples, (kSpeakerMelFft - kSpeakerMelHop) / 2);
  int64_t frames = 0;
  const std::vector<float> magnitude = stft_magnitude(padded, kSpeakerMelFft, kSpeakerMelHop, 1e-9, &frames);
  std::vector<float> mel = apply_filterbank(magnitude, frames, mel_filterbank_, config_.mel_dim);
  for (float& v : mel) v = std::log(std::max(v, 1e-5f));
  return mel;
}

Tensor SpeakerEncoder::apply(const Conv& conv, const Tensor& x, bool relu) const {
  // Padding "same", reflect mode: left total / 2 rows, right the rest, mirrored about the edges.
  const int64_t total = static_cast<int64_t>(conv.dilation) * (conv.kernel - 1), left = total / 2;
  const int64_t steps = x.dim(0);
  Tensor out = Tensor::empty({steps, conv.weight.dim(0)}, DType::kF32, device_);
  if (total == 0) {
    ops::linear(x, conv.weight, conv.bias, out);
  } else {
    if (std::max(left, total - left) >= steps) {
      throw_error(ErrorCode::kInvalidArgument,
                  "the reference audio is too short for the speaker encoder ({} mel frames; a kernel of {} with "
                  "dilation {} needs more than {})",
                  steps, conv.kernel, conv.dilation, std::max(left, total - left));
    }
    Tensor unfolded = Tensor::empty({steps, conv.weight.dim(1)}, DType::kF32, device_);
    ops::unfold_rows(x, conv.kernel, 1, conv.dilation, left, ops::RowPadding::kReflect, 0, unfolded);
    ops::linear(unfolded, conv.weight, conv.bias, out);
  }
  if (relu) ops::clamp(out, 0.0f, INFINITY, out);
  return out;
}

std::vector<float> SpeakerEncoder::embed_mel(std::span<const float> mel, int64_t frames) const {
  const SpeakerEncoderConfig& c = config_;
  if (mel.size() != static_cast<size_t>(frames * c.mel_dim)) {
    throw_error(ErrorCode::kInvalidArgument, "speaker encoder: {} mel values are not {} frames of {}", mel.size(),
                frames, c.mel_dim);
  }
  Tensor x = Tensor::borrow(const_cast<float*>(mel.data()), {frames, c.mel_dim}, DType::kF32).to(device_);
  x = apply(first_, x, true);

  std::vector<Tensor> outputs;
  for (const SeRes2NetBlock& block : blocks_) {
    Tensor h = apply(block.tdnn1, x, true);
    // Res2Net: chunk 0 passes, chunk 1 through conv 0, chunk j >= 2 through conv j-1 after adding
    // the previous chunk's output.
    const int64_t chunk = h.dim(1) / c.res2net_scale;
    Tensor part = Tensor::empty({frames, chunk}, DType::kF32, device_), previous;
    for (int j = 1; j < c.res2net_scale; ++j) {
      ops::copy_columns(h, j * chunk, part, 0, chunk);
      if (j >= 2) ops::add(part, previous, part);
      previous = apply(block.res2net[j - 1], part, true);
      ops::copy_columns(previous, 0, h, j * chunk, chunk);
    }
    h = apply(block.tdnn2, h, true);
    // Squeeze-excitation: the time mean through conv1 + ReLU and conv2 + sigmoid scales the
    // channels; then the block's residual.
    Tensor stats = Tensor::empty({2, h.dim(1)}, DType::kF32, device_);
    ops::weighted_mean_std(h, Tensor(), stats);
    Tensor gate = apply(block.se2, apply(block.se1, stats.slice_rows(0, 1), true), false);
    ops::sigmoid(gate, gate);
    ops::mul_columns(h, gate.reshape({h.dim(1)}), h);
    ops::add(h, x, h);
    x = h;
    outputs.push_back(h);
  }

  // Multi-layer feature aggregation over the SE-Res2Net blocks' outputs, side by side.
  int64_t total = 0;
  for (const Tensor& o : outputs) total += o.dim(1);
  Tensor cat = Tensor::empty({frames, total}, DType::kF32, device_);
  int64_t column = 0;
  for (const Tensor& o : outputs) {
    ops::copy_columns(o, 0, cat, column, o.dim(1));
    column += o.dim(1);
  }
  x = apply(mfa_, cat, true);

  // Attentive statistics pooling: the TDNN over [x | mean | std] rows (the statistics' part is one
  // bias for every row), tanh, the logits per channel, then the softmax-weighted mean and std.
  const int64_t ch = x.dim(1);
  Tensor stats = Tensor::empty({2, ch}, DType::kF32, device_);
  ops::weighted_mean_std(x, Tensor(), stats);
  Tensor stats_bias = apply(asp_tdnn_stats_, stats.reshape({1, 2 * ch}), false);
  Tensor attention = Tensor::empty({frames, c.attention_channels}, DType::kF32, device_);
  ops::linear(x, asp_tdnn_x_.weight, stats_bias.reshape({c.attention_channels}), attention);
  ops::clamp(attention, 0.0f, INFINITY, attention);
  ops::tanh(attention, attention);
  const Tensor logits = apply(asp_conv_, attention, false);
  Tensor pooled = Tensor::empty({2, ch}, DType::kF32, device_);
  ops::weighted_mean_std(x, logits, pooled);
  const Tensor embedding = apply(fc_, pooled.reshape({1, 2 * ch}), false).to(tensor::Device::cpu());
  return std::vector<float>(embedding.data<float>(), embedding.data<float>() + embedding.numel());
}
std::vector<float> SpeakerEncoder::embed(std::span<const float> samples) const {
  const std::vector<float> m = mel(samples);
  return embed_mel(m, static_cast<int64_t>(m.size()) / config_.mel_dim);
}

}  // namespace omni::model::qwen3_tts
