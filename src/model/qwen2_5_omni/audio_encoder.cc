#include "model/qwen2_5_omni/audio_encoder.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "model/hf_config.h"
#include "model/safetensors.h"
#include "model/whisper_layers.h"
#include "tensor/ops.h"

namespace omni::model::qwen2_5_omni {
namespace {

using tensor::DType;
using tensor::Tensor;
namespace ops = tensor::ops;

constexpr float kLayerNormEps = 1e-5f;
constexpr int kKernel = 3;

int positive_field(const Json& c, const char* key, int fallback, const std::string& source) {
  return bounded_int(c, key, fallback, 1, 1 << 20, source);
}

int64_t halved(int64_t n) { return (n - 1) / 2 + 1; }

// A Conv1d kernel [out, in, 3] in the tap-major layout of ops::unfold_rows: [out, 3 * in].
Tensor tap_major(const Tensor& w) {
  const int64_t out = w.dim(0), in = w.dim(1);
  Tensor t = Tensor::empty({out, kKernel * in}, DType::kF32);
  const float* src = w.data<float>();
  float* dst = t.data<float>();
  for (int64_t o = 0; o < out; ++o)
    for (int64_t c = 0; c < in; ++c)
      for (int64_t j = 0; j < kKernel; ++j) dst[(o * kKernel + j) * in + c] = src[(o * in + c) * kKernel + j];
  return t;
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
  a.output_dim = positive_field(c, "output_dim", a.output_dim, source);
  a.n_window = positive_field(c, "n_window", a.n_window, source);
  a.max_source_positions = positive_field(c, "max_source_positions", a.max_source_positions, source);
  if (a.d_model % a.encoder_attention_heads != 0 || a.d_model % 2 != 0 || a.d_model < 4) {
    throw_error(ErrorCode::kLoadFailed,
                "{}: d_model {} must be even, at least 4 and a multiple of encoder_attention_heads {}", source,
                a.d_model, a.encoder_attention_heads);
  }
  if (a.n_window > a.max_source_positions) {
    throw_error(ErrorCode::kLoadFailed, "{}: a chunk's {} rows (n_window) exceed max_source_positions {}", source,
                a.n_window, a.max_source_positions);
  }
  if (auto it = c.find("activation_function"); it != c.end() && it->is_string() && it->get<std::string>() != "gelu") {
    throw_error(ErrorCode::kUnsupported, "{}: activation_function '{}' is not supported (gelu)", source,
                it->get<std::string>());
  }
  if (auto it = c.find("scale_embedding"); it != c.end() && it->is_boolean() && it->get<bool>()) {
    throw_error(ErrorCode::kUnsupported, "{}: scale_embedding true is not supported (the reference ignores it)",
                source);
  }
  return a;
}

AudioEncoderConfig thinker_audio_config(const Json& config, const std::string& source) {
  auto thinker = config.find("thinker_config");
  if (thinker == config.end() || !thinker->is_object() || !thinker->contains("audio_config")) {
    throw_error(ErrorCode::kLoadFailed, "{}: missing field 'thinker_config.audio_config'", source);
  }
  return parse_audio_encoder_config((*thinker)["audio_config"], source + ": thinker_config.audio_config");
}

int64_t audio_conv_length(int64_t frames) { return halved(frames); }

int64_t audio_output_length(int64_t frames) { return audio_conv_length(frames) / 2; }

Tensor AudioEncoder::weight(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape) const {
  return ckpt.load(name, shape, placement_.dtype, placement_.device);
}

AudioEncoder::AudioEncoder(const Checkpoint& ckpt, const AudioEncoderConfig& config, const std::string& prefix,
                           Placement placement)
    : config_(config), placement_(placement) {
  const int64_t d = config_.d_model, ffn = config_.encoder_ffn_dim, mels = config_.num_mel_bins;
  const auto [device, dtype] = placement_;
  if (config_.n_window > config_.max_source_positions || d % 2 != 0 || d < 4) {
    throw_error(ErrorCode::kInvalidArgument,
                "audio tower: d_model {} must be even and at least 4, n_window {} at most max_source_positions {}", d,
                config_.n_window, config_.max_source_positions);
  }
  conv1_w_ = place(tap_major(ckpt.load_f32(prefix + "conv1.weight", {d, mels, kKernel})), dtype, device);
  conv1_b_ = weight(ckpt, prefix + "conv1.bias", {d});
  conv2_w_ = place(tap_major(ckpt.load_f32(prefix + "conv2.weight", {d, d, kKernel})), dtype, device);
  conv2_b_ = weight(ckpt, prefix + "conv2.bias", {d});
  layers_.emplace(ckpt, prefix,
                  WhisperLayers::Shape{.d_model = d,
                                       .ffn_dim = ffn,
                                       .heads = config_.encoder_attention_heads,
                                       .num_layers = config_.encoder_layers,
                                       .k_bias = false},
                  placement_);
  ln_post_w_ = weight(ckpt, prefix + "ln_post.weight", {d});
  ln_post_b_ = weight(ckpt, prefix + "ln_post.bias", {d});
  proj_w_ = weight(ckpt, prefix + "proj.weight", {config_.output_dim, d});
  proj_b_ = weight(ckpt, prefix + "proj.bias", {config_.output_dim});

  // Whisper's sinusoids: [sin | cos] of position * exp(-i * log(10000) / (d/2 - 1)); the increment
  // in double as numpy computes it, the rest in float32 as the reference.
  positions_ = Tensor::empty({config_.max_source_positions, d}, DType::kF32);
  const double increment = std::log(10000.0) / static_cast<double>(d / 2 - 1);
  std::vector<float> inv(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i) inv[i] = std::exp(static_cast<float>(-increment) * static_cast<float>(i));
  float* pos = positions_.data<float>();
  for (int64_t t = 0; t < config_.max_source_positions; ++t) {
    for (int64_t i = 0; i < d / 2; ++i) {
      const float angle = static_cast<float>(t) * inv[i];
      pos[t * d + i] = std::sin(angle);
      pos[t * d + d / 2 + i] = std::cos(angle);
    }
  }
}

void AudioEncoder::front_end(const Tensor& chunk, Tensor& out) const {
  const auto [device, dtype] = placement_;
  const int64_t frames = chunk.dim(0), mels = chunk.dim(1), d = config_.d_model;
  // conv1 over the chunk's own frames with zeros around them: the reference's right padding is
  // zeros too, and it zeroes conv1's outputs past the chunk before conv2, as this does by not
  // computing them.
  Tensor taps = Tensor::empty({frames, kKernel * mels}, dtype, device);
  ops::unfold_rows(chunk, kKernel, /*stride=*/1, /*dilation=*/1, /*left=*/1, ops::RowPadding::kZeros, 0, taps);
  Tensor h = Tensor::empty({frames, d}, dtype, device);
  ops::linear(taps, conv1_w_, conv1_b_, h);
  ops::gelu(h, ops::GeluApproximation::kNone, h);
  Tensor taps2 = Tensor::empty({out.dim(0), kKernel * d}, dtype, device);
  ops::unfold_rows(h, kKernel, /*stride=*/2, /*dilation=*/1, /*left=*/1, ops::RowPadding::kZeros, 0, taps2);
  ops::linear(taps2, conv2_w_, conv2_b_, out);
  ops::gelu(out, ops::GeluApproximation::kNone, out);
}

Tensor AudioEncoder::encode(std::span<const AudioFeatures> audios) const {
  const auto [device, dtype] = placement_;
  const int64_t chunk_frames = 2 * static_cast<int64_t>(config_.n_window), mels = config_.num_mel_bins;
  const int64_t d = config_.d_model;
  struct Chunk {
    size_t audio;
    int64_t first, frames;
  };
  std::vector<Chunk> chunks;
  std::vector<int64_t> conv_rows(audios.size(), 0);
  int64_t total = 0, outputs = 0, total_frames = 0;
  for (size_t a = 0; a < audios.size(); ++a) {
    if (audios[a].frames < 3) {
      throw_error(ErrorCode::kInvalidArgument, "audio {} has {} feature frames; the audio tower needs at least 3", a,
                  audios[a].frames);
    }
    for (int64_t first = 0; first < audios[a].frames; first += chunk_frames) {
      chunks.push_back({a, first, std::min(chunk_frames, audios[a].frames - first)});
    }
    total_frames += audios[a].frames;
    conv_rows[a] = audio_conv_length(audios[a].frames);
    total += conv_rows[a];
    outputs += audio_output_length(audios[a].frames);
  }

  // 1-2: every chunk time-major in one upload; the convolutions per chunk into its rows; the
  // positions restarting in every chunk.
  Tensor frames_host = Tensor::empty({total_frames, mels}, DType::kF32);
  Tensor positions = Tensor::empty({total, d}, DType::kF32);
  std::vector<int64_t> chunk_first_frame, chunk_rows;
  {
    float* img = frames_host.data<float>();
    float* pos = positions.data<float>();
    int64_t offset = 0;
    for (const Chunk& c : chunks) {
      const AudioFeatures& f = audios[c.audio];
      for (int64_t t = 0; t < c.frames; ++t)
        for (int64_t m = 0; m < mels; ++m) img[(offset + t) * mels + m] = f.values[m * f.row_stride + c.first + t];
      chunk_first_frame.push_back(offset);
      offset += c.frames;
      const int64_t rows = halved(c.frames);
      chunk_rows.push_back(rows);
      pos = std::copy(positions_.data<float>(), positions_.data<float>() + rows * d, pos);
    }
  }
  const Tensor placed = place(frames_host, dtype, device);
  Tensor h = Tensor::empty({total, d}, dtype, device);
  int64_t row = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    Tensor rows = h.slice_rows(row, row + chunk_rows[c]);
    front_end(placed.slice_rows(chunk_first_frame[c], chunk_first_frame[c] + chunks[c].frames), rows);
    row += chunk_rows[c];
  }
  ops::add(h, place(positions, dtype, device), h);

  // 3: the layers, attention within each chunk.
  layers_->run(h, chunk_rows);

  // 4: per audio the average of each pair of rows (an odd last row dropped), then ln_post and proj.
  Tensor index = Tensor::empty({outputs, 2}, DType::kI32);
  Tensor halves = Tensor::empty({outputs, 2}, DType::kF32);
  {
    int32_t* idx = index.data<int32_t>();
    float* wts = halves.data<float>();
    int64_t first = 0, o = 0;
    for (size_t a = 0; a < audios.size(); ++a) {
      for (int64_t i = 0; i < conv_rows[a] / 2; ++i, ++o) {
        idx[2 * o] = static_cast<int32_t>(first + 2 * i);
        idx[2 * o + 1] = static_cast<int32_t>(first + 2 * i + 1);
        wts[2 * o] = wts[2 * o + 1] = 0.5f;
      }
      first += conv_rows[a];
    }
  }
  Tensor pooled = Tensor::empty({outputs, d}, dtype, device);
  ops::gather_weighted_sum(h, index, place(halves, dtype, device), pooled);
  Tensor normed = Tensor::empty({outputs, d}, dtype, device);
  ops::layer_norm(pooled, ln_post_w_, ln_post_b_, kLayerNormEps, normed);
  Tensor out = Tensor::empty({outputs, config_.output_dim}, dtype, device);
  ops::linear(normed, proj_w_, proj_b_, out);
  return host_f32(out);
}

}  // namespace omni::model::qwen2_5_omni
