#include "model/qwen3_omni/audio_encoder.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "model/hf_config.h"
#include "model/safetensors.h"
#include "model/whisper_layers.h"
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

Tensor AudioEncoder::weight(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape) const {
  return ckpt.load(name, shape, placement_.dtype, placement_.device);
}

AudioEncoder::AudioEncoder(const Checkpoint& ckpt, const AudioEncoderConfig& config, const std::string& prefix,
                           Placement placement)
    : config_(config), placement_(placement) {
  const int64_t d = config_.d_model, hidden = config_.downsample_hidden_size, ffn = config_.encoder_ffn_dim;
  freq_rows_ = halved(halved(halved(config_.num_mel_bins)));
  for (int i = 0; i < 3; ++i) {
    const std::string name = prefix + "conv2d" + std::to_string(i + 1);
    const int64_t in = i == 0 ? 1 : hidden;
    // [out, in, mel tap, time tap] -> [out, in, time tap, mel tap]: the chunk is a time-major image.
    const Tensor w = ckpt.load_f32(name + ".weight", {hidden, in, 3, 3});
    Tensor swapped = Tensor::empty({hidden, in, 3, 3}, DType::kF32);
    for (int64_t oc = 0; oc < hidden * in; ++oc)
      for (int64_t a = 0; a < 3; ++a)
        for (int64_t b = 0; b < 3; ++b) swapped.data<float>()[oc * 9 + b * 3 + a] = w.data<float>()[oc * 9 + a * 3 + b];
    conv_w_[i] = place(swapped, placement_.dtype, placement_.device);
    conv_b_[i] = weight(ckpt, name + ".bias", {hidden});
  }
  // Columns channel-major (c * freq + f) as the reference flattens, reordered to the convolution
  // output's mel row-major order (f * channels + c); the embedding scale folded in.
  {
    const Tensor w = ckpt.load_f32(prefix + "conv_out.weight", {d, hidden * freq_rows_});
    const float scale = config_.scale_embedding ? std::sqrt(static_cast<float>(d)) : 1.0f;
    Tensor reordered = Tensor::empty(w.shape(), DType::kF32);
    for (int64_t o = 0; o < d; ++o)
      for (int64_t c = 0; c < hidden; ++c)
        for (int64_t f = 0; f < freq_rows_; ++f) {
          reordered.data<float>()[(o * freq_rows_ + f) * hidden + c] =
              w.data<float>()[(o * hidden + c) * freq_rows_ + f] * scale;
        }
    conv_out_ = place(reordered, placement_.dtype, placement_.device);
  }
  layers_.emplace(ckpt, prefix,
                  WhisperLayers::Shape{.d_model = d,
                                       .ffn_dim = ffn,
                                       .heads = config_.encoder_attention_heads,
                                       .num_layers = config_.encoder_layers,
                                       .k_bias = true},
                  placement_);
  ln_post_w_ = weight(ckpt, prefix + "ln_post.weight", {d});
  ln_post_b_ = weight(ckpt, prefix + "ln_post.bias", {d});
  proj1_w_ = weight(ckpt, prefix + "proj1.weight", {d, d});
  proj1_b_ = weight(ckpt, prefix + "proj1.bias", {d});
  proj2_w_ = weight(ckpt, prefix + "proj2.weight", {config_.output_dim, d});
  proj2_b_ = weight(ckpt, prefix + "proj2.bias", {config_.output_dim});

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

void AudioEncoder::front_end(const Tensor& chunk, int64_t valid, Tensor& out) const {
  const auto [device, dtype] = placement_;
  Tensor x = chunk;
  for (int i = 0; i < 3; ++i) {
    Tensor y = Tensor::empty({halved(x.dim(0)), halved(x.dim(1)), config_.downsample_hidden_size}, dtype, device);
    ops::conv2d(x, conv_w_[i], conv_b_[i], /*padding=*/1, /*stride=*/2, y);
    ops::gelu(y, ops::GeluApproximation::kNone, y);
    x = std::move(y);
  }
  // [time, freq, channels] -> rows [time, freq * channels], of which the valid ones.
  ops::linear(x.reshape({x.dim(0), x.dim(1) * x.dim(2)}).slice_rows(0, valid), conv_out_, Tensor(), out);
}

Tensor AudioEncoder::encode(std::span<const AudioFeatures> audios) const {
  const auto [device, dtype] = placement_;
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

  // 1-2: every chunk zero-padded to the widest, time-major, in one upload; the convolution front
  // end per chunk into its valid rows; then the positions, restarting in every chunk.
  Tensor images = Tensor::zeros({static_cast<int64_t>(chunks.size()), widest, mels}, DType::kF32);
  Tensor positions = Tensor::empty({total, d}, DType::kF32);
  {
    float* img = images.data<float>();
    float* pos = positions.data<float>();
    for (const Chunk& c : chunks) {
      const AudioFeatures& f = audios[c.audio];
      for (int64_t t = 0; t < c.frames; ++t)
        for (int64_t m = 0; m < mels; ++m) img[t * mels + m] = f.values[m * f.row_stride + c.first + t];
      img += widest * mels;
      const int64_t valid = halved(halved(halved(c.frames)));
      pos = std::copy(positions_.data<float>(), positions_.data<float>() + valid * d, pos);
    }
  }
  const Tensor placed_images = place(images, dtype, device);
  Tensor h = Tensor::empty({total, d}, dtype, device);
  int64_t row = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const int64_t valid = halved(halved(halved(chunks[c].frames)));
    Tensor rows = h.slice_rows(row, row + valid);
    front_end(placed_images.slice_rows(static_cast<int64_t>(c), static_cast<int64_t>(c) + 1).reshape({widest, mels, 1}),
              valid, rows);
    row += valid;
  }
  ops::add(h, place(positions, dtype, device), h);

  // 3: the attention windows, per audio.
  const int64_t window = widest_rows * (config_.n_window_infer / chunk_frames);
  std::vector<int64_t> windows;
  for (int64_t rows : rows_per_audio) {
    for (int64_t r = rows; r > 0; r -= window) windows.push_back(std::min(window, r));
  }
  layers_->run(h, windows);
  Tensor x = Tensor::empty({total, d}, dtype, device), branch = Tensor::empty({total, d}, dtype, device);

  // 4: the projections to the thinker's width.
  ops::layer_norm(h, ln_post_w_, ln_post_b_, kLayerNormEps, x);
  ops::linear(x, proj1_w_, proj1_b_, branch);
  ops::gelu(branch, ops::GeluApproximation::kNone, branch);
  Tensor out = Tensor::empty({total, config_.output_dim}, dtype, device);
  ops::linear(branch, proj2_w_, proj2_b_, out);
  return host_f32(out);
}

}  // namespace omni::model::qwen3_omni
