#include "model/qwen3_omni/audio_encoder.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "model/hf_config.h"
#include "model/safetensors.h"
#include "tensor/ops.h"

namespace omni::model::qwen3_omni {
namespace {

using tensor::DType;
using tensor::Tensor;
namespace ops = tensor::ops;

constexpr float kLayerNormEps = 1e-5f;

// A size field of the tower's config: 1 to 2^20.
int positive_field(const Json& c, const char* key, int fallback, const std::string& source) {
  return bounded_int(c, key, fallback, 1, 1 << 20, source);
}

// Rows after one 3 x 3 convolution with stride 2 and padding 1.
int64_t halved(int64_t n) { return (n - 1) / 2 + 1; }

// A 3 x 3, stride 2, padding 1 convolution of x [channels, height, width] with weight
// [out, channels, 3, 3] and bias [out], then exact GELU: [out, halved(height), halved(width)].
Tensor conv3x3_gelu(const float* x, int64_t channels, int64_t height, int64_t width, const Tensor& weight,
                    const Tensor& bias) {
  const int64_t oh = halved(height), ow = halved(width), out_channels = weight.dim(0);
  Tensor columns = Tensor::zeros({channels * 9, oh * ow}, DType::kF32);
  float* col = columns.data<float>();
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t kh = 0; kh < 3; ++kh) {
      for (int64_t kw = 0; kw < 3; ++kw) {
        float* row = col + ((c * 3 + kh) * 3 + kw) * oh * ow;
        for (int64_t i = 0; i < oh; ++i) {
          const int64_t ih = 2 * i - 1 + kh;
          if (ih < 0 || ih >= height) continue;
          const float* in = x + (c * height + ih) * width;
          for (int64_t j = 0; j < ow; ++j) {
            const int64_t iw = 2 * j - 1 + kw;
            if (iw >= 0 && iw < width) row[i * ow + j] = in[iw];
          }
        }
      }
    }
  }
  Tensor out = Tensor::empty({out_channels, oh * ow}, DType::kF32);
  ops::matmul(weight.reshape({out_channels, channels * 9}), columns, /*transpose_b=*/false, out);
  float* o = out.data<float>();
  const float* b = bias.data<float>();
  for (int64_t c = 0; c < out_channels; ++c) {
    for (int64_t p = 0; p < oh * ow; ++p) o[c * oh * ow + p] += b[c];
  }
  ops::gelu(out, ops::GeluApproximation::kNone, out);
  return out.reshape({out_channels, oh, ow});
}

// out = act(x @ w^T + b) in new storage.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor out = Tensor::empty({x.dim(0), w.dim(0)}, DType::kF32);
  ops::linear(x, w, b, out);
  return out;
}

}  // namespace

AudioEncoderConfig parse_audio_encoder_config(const Json& c, const std::string& source) {
  if (!c.is_object()) throw_error(ErrorCode::kLoadFailed, "{}: must be a JSON object", source);
  AudioEncoderConfig a;
  a.num_mel_bins = positive_field(c, "num_mel_bins", a.num_mel_bins, source);
  a.d_model = positive_field(c, "d_model", a.d_model, source);
  a.encoder_layers = positive_field(c, "encoder_layers", a.encoder_layers, source);
  a.encoder_attention_heads = positive_field(c, "encoder_attention_heads", a.encoder_attention_heads, source);
  a.encoder_ffn_dim = positive_field(c, "encoder_ffn_dim", a.encoder_ffn_dim, source);
  a.downsample_hidden_size = positive_field(c, "downsample_hidden_size", a.downsample_hidden_size, source);
  a.output_dim = positive_field(c, "output_dim", a.output_dim, source);
  a.n_window = positive_field(c, "n_window", a.n_window, source);
  a.n_window_infer = positive_field(c, "n_window_infer", a.n_window_infer, source);
  a.max_source_positions = positive_field(c, "max_source_positions", a.max_source_positions, source);
  if (auto it = c.find("scale_embedding"); it != c.end() && it->is_boolean()) a.scale_embedding = it->get<bool>();
  if (a.d_model % a.encoder_attention_heads != 0 || a.d_model % 2 != 0) {
    throw_error(ErrorCode::kLoadFailed, "{}: d_model {} must be even and a multiple of encoder_attention_heads {}",
                source, a.d_model, a.encoder_attention_heads);
  }
  if (a.n_window_infer < 2 * a.n_window) {
    throw_error(ErrorCode::kLoadFailed, "{}: n_window_infer {} must be at least 2 * n_window ({})", source,
                a.n_window_infer, 2 * a.n_window);
  }
  if (auto it = c.find("activation_function"); it != c.end() && it->is_string() && it->get<std::string>() != "gelu") {
    throw_error(ErrorCode::kUnsupported, "{}: activation_function '{}' is not supported (gelu)", source,
                it->get<std::string>());
  }
  return a;
}

int64_t audio_output_length(int64_t frames, int n_window) {
  const int64_t chunk = 2 * static_cast<int64_t>(n_window);
  const int64_t rest = frames % chunk;
  return (rest == 0 ? 0 : halved(halved(halved(rest)))) + (frames / chunk) * 13;
}

AudioEncoder::AudioEncoder(const Checkpoint& ckpt, const AudioEncoderConfig& config, const std::string& prefix)
    : config_(config) {
  const int64_t d = config_.d_model, hidden = config_.downsample_hidden_size, ffn = config_.encoder_ffn_dim;
  freq_rows_ = halved(halved(halved(config_.num_mel_bins)));
  for (int i = 0; i < 3; ++i) {
    const std::string name = prefix + "conv2d" + std::to_string(i + 1);
    conv_w_[i] = ckpt.load_f32(name + ".weight", {hidden, i == 0 ? 1 : hidden, 3, 3});
    conv_b_[i] = ckpt.load_f32(name + ".bias", {hidden});
  }
  conv_out_ = ckpt.load_f32(prefix + "conv_out.weight", {d, hidden * freq_rows_});
  for (int l = 0; l < config_.encoder_layers; ++l) {
    const std::string p = prefix + "layers." + std::to_string(l) + ".";
    Layer layer;
    layer.attn_norm_w = ckpt.load_f32(p + "self_attn_layer_norm.weight", {d});
    layer.attn_norm_b = ckpt.load_f32(p + "self_attn_layer_norm.bias", {d});
    layer.q_w = ckpt.load_f32(p + "self_attn.q_proj.weight", {d, d});
    layer.q_b = ckpt.load_f32(p + "self_attn.q_proj.bias", {d});
    layer.k_w = ckpt.load_f32(p + "self_attn.k_proj.weight", {d, d});
    layer.k_b = ckpt.load_f32(p + "self_attn.k_proj.bias", {d});
    layer.v_w = ckpt.load_f32(p + "self_attn.v_proj.weight", {d, d});
    layer.v_b = ckpt.load_f32(p + "self_attn.v_proj.bias", {d});
    layer.out_w = ckpt.load_f32(p + "self_attn.out_proj.weight", {d, d});
    layer.out_b = ckpt.load_f32(p + "self_attn.out_proj.bias", {d});
    layer.mlp_norm_w = ckpt.load_f32(p + "final_layer_norm.weight", {d});
    layer.mlp_norm_b = ckpt.load_f32(p + "final_layer_norm.bias", {d});
    layer.fc1_w = ckpt.load_f32(p + "fc1.weight", {ffn, d});
    layer.fc1_b = ckpt.load_f32(p + "fc1.bias", {ffn});
    layer.fc2_w = ckpt.load_f32(p + "fc2.weight", {d, ffn});
    layer.fc2_b = ckpt.load_f32(p + "fc2.bias", {d});
    layers_.push_back(std::move(layer));
  }
  ln_post_w_ = ckpt.load_f32(prefix + "ln_post.weight", {d});
  ln_post_b_ = ckpt.load_f32(prefix + "ln_post.bias", {d});
  proj1_w_ = ckpt.load_f32(prefix + "proj1.weight", {d, d});
  proj1_b_ = ckpt.load_f32(prefix + "proj1.bias", {d});
  proj2_w_ = ckpt.load_f32(prefix + "proj2.weight", {config_.output_dim, d});
  proj2_b_ = ckpt.load_f32(prefix + "proj2.bias", {config_.output_dim});

  // Whisper's sinusoids, [sin | cos] of position * 10000^(-i / (d/2 - 1)), in float32 as the reference.
  positions_ = Tensor::empty({config_.max_source_positions, d}, DType::kF32);
  const float increment = static_cast<float>(std::log(10000.0) / static_cast<double>(d / 2 - 1));
  float* pos = positions_.data<float>();
  for (int64_t t = 0; t < config_.max_source_positions; ++t) {
    for (int64_t i = 0; i < d / 2; ++i) {
      const float angle = static_cast<float>(t) * std::exp(-increment * static_cast<float>(i));
      pos[t * d + i] = std::sin(angle);
      pos[t * d + d / 2 + i] = std::cos(angle);
    }
  }
}

Tensor AudioEncoder::front_end(const std::vector<float>& chunk, int64_t width) const {
  Tensor x = conv3x3_gelu(chunk.data(), 1, config_.num_mel_bins, width, conv_w_[0], conv_b_[0]);
  for (int i = 1; i < 3; ++i) x = conv3x3_gelu(x.data<float>(), x.dim(0), x.dim(1), x.dim(2), conv_w_[i], conv_b_[i]);
  // [channels, freq, time] -> [time, channels * freq]
  const int64_t channels = x.dim(0), freq = x.dim(1), time = x.dim(2);
  Tensor rows = Tensor::empty({time, channels * freq}, DType::kF32);
  const float* in = x.data<float>();
  float* r = rows.data<float>();
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t f = 0; f < freq; ++f) {
      for (int64_t t = 0; t < time; ++t) r[t * channels * freq + c * freq + f] = in[(c * freq + f) * time + t];
    }
  }
  return linear(rows, conv_out_, Tensor());
}

void AudioEncoder::windowed_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                      std::span<const int64_t> windows, Tensor& out) const {
  const int64_t d = config_.d_model, heads = config_.encoder_attention_heads, hd = d / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float *qp = q.data<float>(), *kp = k.data<float>(), *vp = v.data<float>();
  float* op = out.data<float>();
  std::vector<float> scores;
  int64_t start = 0;
  for (int64_t w : windows) {
    scores.resize(static_cast<size_t>(w));
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < w; ++i) {
        const float* qi = qp + (start + i) * d + h * hd;
        float top = -INFINITY;
        for (int64_t j = 0; j < w; ++j) {
          const float* kj = kp + (start + j) * d + h * hd;
          float s = 0.0f;
          for (int64_t e = 0; e < hd; ++e) s += qi[e] * kj[e];
          scores[j] = s * scale;
          top = std::max(top, scores[j]);
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < w; ++j) {
          scores[j] = std::exp(scores[j] - top);
          sum += scores[j];
        }
        float* oi = op + (start + i) * d + h * hd;
        std::fill(oi, oi + hd, 0.0f);
        for (int64_t j = 0; j < w; ++j) {
          const float p = scores[j] / sum;
          const float* vj = vp + (start + j) * d + h * hd;
          for (int64_t e = 0; e < hd; ++e) oi[e] += p * vj[e];
        }
      }
    }
    start += w;
  }
}

Tensor AudioEncoder::encode(std::span<const AudioFeatures> audios) const {
  const int64_t chunk_frames = 2 * static_cast<int64_t>(config_.n_window), mels = config_.num_mel_bins;
  const int64_t d = config_.d_model;
  // Every audio's chunks (audio, first frame, frames), and the longest chunk.
  struct Chunk {
    size_t audio;
    int64_t first, frames;
  };
  std::vector<Chunk> chunks;
  int64_t widest = 0;
  for (size_t a = 0; a < audios.size(); ++a) {
    if (audios[a].frames <= 0) throw_error(ErrorCode::kInvalidArgument, "audio {} has no feature frames", a);
    for (int64_t first = 0; first < audios[a].frames; first += chunk_frames) {
      const int64_t frames = std::min(chunk_frames, audios[a].frames - first);
      chunks.push_back({a, first, frames});
      widest = std::max(widest, frames);
    }
  }
  const int64_t widest_rows = halved(halved(halved(widest)));
  if (widest_rows > config_.max_source_positions) {
    throw_error(ErrorCode::kInvalidArgument, "audio chunks of {} rows exceed max_source_positions {}", widest_rows,
                config_.max_source_positions);
  }
  std::vector<int64_t> rows_per_audio(audios.size(), 0);
  for (const Chunk& c : chunks) rows_per_audio[c.audio] += halved(halved(halved(c.frames)));
  int64_t total = 0;
  for (int64_t r : rows_per_audio) total += r;

  // 1-2: the convolution front end per chunk, padded to the widest; the valid rows plus positions.
  Tensor h = Tensor::empty({total, d}, DType::kF32);
  float* hp = h.data<float>();
  const float* pos = positions_.data<float>();
  std::vector<float> padded(static_cast<size_t>(mels * widest));
  int64_t row = 0;
  for (const Chunk& c : chunks) {
    std::fill(padded.begin(), padded.end(), 0.0f);
    const AudioFeatures& f = audios[c.audio];
    for (int64_t m = 0; m < mels; ++m) {
      std::copy(f.values + m * f.row_stride + c.first, f.values + m * f.row_stride + c.first + c.frames,
                padded.data() + m * widest);
    }
    const Tensor embedded = front_end(padded, widest);
    const int64_t valid = halved(halved(halved(c.frames)));
    const float* e = embedded.data<float>();
    const float scale = config_.scale_embedding ? std::sqrt(static_cast<float>(d)) : 1.0f;
    for (int64_t t = 0; t < valid; ++t, ++row) {
      for (int64_t i = 0; i < d; ++i) hp[row * d + i] = e[t * d + i] * scale + pos[t * d + i];
    }
  }

  // 3: the attention windows, per audio.
  const int64_t window = widest_rows * (config_.n_window_infer / chunk_frames);
  std::vector<int64_t> windows;
  for (int64_t rows : rows_per_audio) {
    for (int64_t r = rows; r > 0; r -= window) windows.push_back(std::min(window, r));
  }
  Tensor x = Tensor::empty({total, d}, DType::kF32);
  Tensor attn = Tensor::empty({total, d}, DType::kF32);
  for (const Layer& l : layers_) {
    ops::layer_norm(h, l.attn_norm_w, l.attn_norm_b, kLayerNormEps, x);
    const Tensor q = linear(x, l.q_w, l.q_b), k = linear(x, l.k_w, l.k_b), v = linear(x, l.v_w, l.v_b);
    windowed_attention(q, k, v, windows, attn);
    ops::add(h, linear(attn, l.out_w, l.out_b), h);
    ops::layer_norm(h, l.mlp_norm_w, l.mlp_norm_b, kLayerNormEps, x);
    Tensor up = linear(x, l.fc1_w, l.fc1_b);
    ops::gelu(up, ops::GeluApproximation::kNone, up);
    ops::add(h, linear(up, l.fc2_w, l.fc2_b), h);
  }

  // 4: the projections to the thinker's width.
  ops::layer_norm(h, ln_post_w_, ln_post_b_, kLayerNormEps, x);
  Tensor p = linear(x, proj1_w_, proj1_b_);
  ops::gelu(p, ops::GeluApproximation::kNone, p);
  return linear(p, proj2_w_, proj2_b_);
}

}  // namespace omni::model::qwen3_omni
