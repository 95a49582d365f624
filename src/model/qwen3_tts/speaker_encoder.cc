#include "model/qwen3_tts/speaker_encoder.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "base/error.h"
#include "model/mel_spectrogram.h"
#include "tensor/cpu/thread_pool.h"
#include "tensor/ops.h"

namespace omni::model::qwen3_tts {

using tensor::DType;
using tensor::Tensor;

namespace {

// Activations [t, c], time-major.
struct Rows {
  int64_t t = 0, c = 0;
  std::vector<float> v;
  Rows(int64_t t_, int64_t c_) : t(t_), c(c_), v(static_cast<size_t>(t_ * c_)) {}
  float* row(int64_t i) { return v.data() + i * c; }
  const float* row(int64_t i) const { return v.data() + i * c; }
  Tensor tensor() { return Tensor::borrow(v.data(), {t, c}, DType::kF32); }
};

// The host loops run on the CPU backend's threads, each element, row or channel alone (the
// result does not depend on the split).
using tensor::cpu::parallel_for;
constexpr int64_t kElementGrain = 1 << 15;

void relu(Rows& x) {
  parallel_for(static_cast<int64_t>(x.v.size()), kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x.v[i] = std::max(x.v[i], 0.0f);
  });
}

}  // namespace

SpeakerEncoder::Conv SpeakerEncoder::load_conv(const Checkpoint& checkpoint, const std::string& name, int out, int in,
                                               int k, int dilation) const {
  const std::string prefix = "speaker_encoder." + name;
  return Conv{checkpoint.load_f32(prefix + ".weight", {out, in, k}), checkpoint.load_f32(prefix + ".bias", {out}),
              dilation};
}

SpeakerEncoder::SpeakerEncoder(const Checkpoint& checkpoint, SpeakerEncoderConfig config) : config_(std::move(config)) {
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
  asp_tdnn_ = load_conv(checkpoint, "asp.tdnn.conv", c.attention_channels, last * 3, 1, 1);
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

namespace {

// Conv1d(padding "same", padding_mode "reflect") over time: left pad total / 2, right the rest.
Rows conv_same(Rows& x, const Tensor& weight, const Tensor& bias, int dilation) {
  const int64_t k = weight.dim(2), total = dilation * (k - 1), left = total / 2, right = total - left;
  Rows out(x.t, weight.dim(0));
  Tensor out_t = out.tensor();
  if (total == 0) {
    tensor::ops::conv1d(x.tensor(), weight, bias, dilation, 1, out_t);
    return out;
  }
  if (std::max(left, right) >= x.t) {
    throw_error(ErrorCode::kInvalidArgument,
                "the reference audio is too short for the speaker encoder ({} mel frames; a kernel of {} with "
                "dilation {} needs more than {})",
                x.t, k, dilation, std::max(left, right));
  }
  Rows padded(x.t + total, x.c);
  parallel_for(padded.t, std::max<int64_t>(1, kElementGrain / x.c), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      int64_t src = i - left;
      if (src < 0) src = -src;
      if (src >= x.t) src = 2 * (x.t - 1) - src;
      std::copy_n(x.row(src), x.c, padded.row(i));
    }
  });
  tensor::ops::conv1d(padded.tensor(), weight, bias, dilation, 1, out_t);
  return out;
}

}  // namespace

std::vector<float> SpeakerEncoder::embed_mel(std::span<const float> mel, int64_t frames) const {
  const SpeakerEncoderConfig& c = config_;
  if (mel.size() != static_cast<size_t>(frames * c.mel_dim)) {
    throw_error(ErrorCode::kInvalidArgument, "speaker encoder: {} mel values are not {} frames of {}", mel.size(),
                frames, c.mel_dim);
  }
  auto tdnn = [](Rows& x, const Conv& conv) {
    Rows y = conv_same(x, conv.weight, conv.bias, conv.dilation);
    relu(y);
    return y;
  };
  Rows x(frames, c.mel_dim);
  std::copy(mel.begin(), mel.end(), x.v.begin());
  x = tdnn(x, first_);

  std::vector<Rows> outputs;
  for (const SeRes2NetBlock& block : blocks_) {
    Rows h = tdnn(x, block.tdnn1);
    // Res2Net: chunk 0 passes, chunk 1 through conv 0, chunk j >= 2 through conv j-1 after adding
    // the previous chunk's output.
    const int64_t chunk = h.c / c.res2net_scale;
    Rows part(h.t, chunk), previous(h.t, chunk);
    for (int j = 1; j < c.res2net_scale; ++j) {
      for (int64_t t = 0; t < h.t; ++t) {
        const float* src = h.row(t) + j * chunk;
        float* dst = part.row(t);
        for (int64_t i = 0; i < chunk; ++i) dst[i] = src[i] + (j >= 2 ? previous.row(t)[i] : 0.0f);
      }
      previous = tdnn(part, block.res2net[j - 1]);
      for (int64_t t = 0; t < h.t; ++t) std::copy_n(previous.row(t), chunk, h.row(t) + j * chunk);
    }
    h = tdnn(h, block.tdnn2);
    // Squeeze-excitation: the time mean through conv1 + ReLU and conv2 + sigmoid scales the channels.
    Rows mean(1, h.c);
    parallel_for(h.c, 16, [&](int64_t begin, int64_t end) {
      for (int64_t ch = begin; ch < end; ++ch) {
        double sum = 0;
        for (int64_t t = 0; t < h.t; ++t) sum += h.row(t)[ch];
        mean.v[ch] = static_cast<float>(sum / h.t);
      }
    });
    Rows s = tdnn(mean, block.se1);
    Rows gate = conv_same(s, block.se2.weight, block.se2.bias, 1);
    parallel_for(h.t, std::max<int64_t>(1, kElementGrain / h.c), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        float* row = h.row(t);
        const float* res = x.row(t);
        for (int64_t ch = 0; ch < h.c; ++ch) row[ch] = row[ch] / (1.0f + std::exp(-gate.v[ch])) + res[ch];
      }
    });
    x = std::move(h);
    outputs.push_back(x);
  }

  // Multi-layer feature aggregation over the SE-Res2Net blocks' outputs, side by side.
  int64_t total = 0;
  for (const Rows& o : outputs) total += o.c;
  Rows cat(frames, total);
  for (int64_t t = 0; t < frames; ++t) {
    float* dst = cat.row(t);
    for (const Rows& o : outputs) dst = std::copy_n(o.row(t), o.c, dst);
  }
  x = tdnn(cat, mfa_);

  // Attentive statistics pooling.
  const int64_t ch = x.c, T = x.t;
  std::vector<double> mean(ch, 0.0), stddev(ch, 0.0);
  parallel_for(ch, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = begin; i < end; ++i) mean[i] += x.row(t)[i];
    }
    for (int64_t i = begin; i < end; ++i) mean[i] /= T;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = begin; i < end; ++i) stddev[i] += (x.row(t)[i] - mean[i]) * (x.row(t)[i] - mean[i]) / T;
    }
    for (int64_t i = begin; i < end; ++i) stddev[i] = std::sqrt(std::max(stddev[i], 1e-12));
  });
  Rows stats(T, 3 * ch);
  parallel_for(T, std::max<int64_t>(1, kElementGrain / (3 * ch)), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* dst = stats.row(t);
      std::copy_n(x.row(t), ch, dst);
      for (int64_t i = 0; i < ch; ++i) {
        dst[ch + i] = static_cast<float>(mean[i]);
        dst[2 * ch + i] = static_cast<float>(stddev[i]);
      }
    }
  });
  Rows attention = tdnn(stats, asp_tdnn_);
  parallel_for(static_cast<int64_t>(attention.v.size()), kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) attention.v[i] = std::tanh(attention.v[i]);
  });
  Rows logits = conv_same(attention, asp_conv_.weight, asp_conv_.bias, 1);
  Rows pooled(1, 2 * ch);
  parallel_for(ch, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      double peak = -INFINITY;
      for (int64_t t = 0; t < T; ++t) peak = std::max(peak, static_cast<double>(logits.row(t)[i]));
      double z = 0, wmean = 0;
      for (int64_t t = 0; t < T; ++t) z += std::exp(logits.row(t)[i] - peak);
      std::vector<double> w(T);
      for (int64_t t = 0; t < T; ++t) {
        w[t] = std::exp(logits.row(t)[i] - peak) / z;
        wmean += w[t] * x.row(t)[i];
      }
      double var = 0;
      for (int64_t t = 0; t < T; ++t) var += w[t] * (x.row(t)[i] - wmean) * (x.row(t)[i] - wmean);
      pooled.v[i] = static_cast<float>(wmean);
      pooled.v[ch + i] = static_cast<float>(std::sqrt(std::max(var, 1e-12)));
    }
  });
  Rows embedding = conv_same(pooled, fc_.weight, fc_.bias, 1);
  return embedding.v;
}

std::vector<float> SpeakerEncoder::embed(std::span<const float> samples) const {
  const std::vector<float> m = mel(samples);
  return embed_mel(m, static_cast<int64_t>(m.size()) / config_.mel_dim);
}

}  // namespace omni::model::qwen3_tts
