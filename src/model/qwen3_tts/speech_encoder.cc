#include "model/qwen3_tts/speech_encoder.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "base/error.h"
#include "tensor/cpu/thread_pool.h"
#include "tensor/ops.h"

namespace omni::model::qwen3_tts {

using tensor::DType;
using tensor::Tensor;

namespace {

// An allocator whose value-initialisation leaves floats unwritten: an activation's first write is
// the loop that computes it (on the CPU threads) rather than a zeroing pass on one thread, which
// for a 10 s reference's first stages (tens of MB) cost as much as the stage's own work.
template <typename T>
struct Uninitialised : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = Uninitialised<U>;
  };
  Uninitialised() = default;
  template <typename U>
  Uninitialised(const Uninitialised<U>&) {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// Activations [t, c], time-major; every element is written before it is read.
struct Rows {
  int64_t t = 0, c = 0;
  std::vector<float, Uninitialised<float>> v;
  Rows() = default;
  Rows(int64_t t_, int64_t c_) : t(t_), c(c_), v(static_cast<size_t>(t_ * c_)) {}
  float* row(int64_t i) { return v.data() + i * c; }
  const float* row(int64_t i) const { return v.data() + i * c; }
  Tensor tensor() { return Tensor::borrow(v.data(), {t, c}, DType::kF32); }
};

// The host loops below run on the CPU backend's threads: each element or row is computed alone,
// so the result does not depend on the split.
using tensor::cpu::parallel_for;
constexpr int64_t kElementGrain = 1 << 15;

float elu(float x) { return x > 0.0f ? x : std::expm1(x); }

void elu(std::span<float> v) {
  parallel_for(static_cast<int64_t>(v.size()), kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) v[i] = elu(v[i]);
  });
}

// ELU of `x`, written to a new Rows.
Rows elu_of(const Rows& x) {
  Rows y(x.t, x.c);
  parallel_for(static_cast<int64_t>(x.v.size()), kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y.v[i] = elu(x.v[i]);
  });
  return y;
}

// x += scale (per column, when given) * y, elementwise; x and y [rows, width].
void add_into(std::span<float> x, const float* y, const float* scale, int64_t width) {
  parallel_for(static_cast<int64_t>(x.size()), kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x[i] += (scale ? scale[i % width] : 1.0f) * y[i];
  });
}

// Output rows of one unfolded block: bounds the unfolded input's memory for long references.
constexpr int64_t kConvBlockRows = 1024;

}  // namespace

SpeechEncoder::Conv SpeechEncoder::load_conv(const Checkpoint& checkpoint, const std::string& name, int in, int out,
                                             int kernel, int stride, int dilation, bool bias, bool replicate) const {
  Conv conv;
  conv.in = in;
  conv.out = out;
  conv.kernel = kernel;
  conv.stride = stride;
  conv.dilation = dilation;
  conv.replicate = replicate;
  const Tensor w = checkpoint.load_f32(name + ".weight", {out, in, kernel});
  // [out, in, k] -> [out, k * in], so that one row of the unfolded input (k taps of `in` channels)
  // meets one row of the weight.
  conv.weight = Tensor::empty({out, static_cast<int64_t>(kernel) * in}, DType::kF32);
  const float* src = w.data<float>();
  float* dst = conv.weight.data<float>();
  for (int o = 0; o < out; ++o) {
    for (int c = 0; c < in; ++c) {
      for (int j = 0; j < kernel; ++j) {
        dst[(static_cast<int64_t>(o) * kernel + j) * in + c] = src[(static_cast<int64_t>(o) * in + c) * kernel + j];
      }
    }
  }
  if (bias) conv.bias = checkpoint.load_f32(name + ".bias", {out});
  return conv;
}

SpeechEncoder::Quantizer SpeechEncoder::load_quantizer(const Checkpoint& checkpoint, const std::string& name,
                                                       int layers) const {
  const SpeechEncoderConfig& c = config_;
  Quantizer q;
  if (c.codebook_dim != c.hidden_size) {
    q.input_proj = checkpoint.load_f32(name + ".input_proj.weight", {c.codebook_dim, c.hidden_size, 1});
    q.input_proj = q.input_proj.reshape({c.codebook_dim, c.hidden_size});
  }
  for (int l = 0; l < layers; ++l) {
    const std::string prefix = name + ".layers." + std::to_string(l) + ".codebook.";
    Tensor table = checkpoint.load_f32(prefix + "embed_sum", {c.codebook_size, c.codebook_dim});
    const Tensor usage = checkpoint.load_f32(prefix + "cluster_usage", {c.codebook_size});
    std::vector<double> norms(static_cast<size_t>(c.codebook_size));
    float* t = table.data<float>();
    for (int n = 0; n < c.codebook_size; ++n) {
      const float divisor = std::max(usage.data<float>()[n], 1e-5f);
      double norm = 0;
      for (int d = 0; d < c.codebook_dim; ++d) {
        float& e = t[static_cast<int64_t>(n) * c.codebook_dim + d];
        e /= divisor;
        norm += static_cast<double>(e) * e;
      }
      norms[n] = norm;
    }
    q.codebooks.push_back(std::move(table));
    q.norms.push_back(std::move(norms));
  }
  return q;
}

SpeechEncoder::SpeechEncoder(const Checkpoint& checkpoint, SpeechEncoderConfig config) : config_(std::move(config)) {
  const SpeechEncoderConfig& c = config_;
  const std::string enc = "encoder.encoder.layers.";
  int index = 0;
  auto layer = [&](int i) { return enc + std::to_string(i); };
  first_ = load_conv(checkpoint, layer(index++) + ".conv", 1, c.num_filters, c.kernel_size, 1, 1, true, false);
  int channels = c.num_filters;
  for (auto it = c.upsampling_ratios.rbegin(); it != c.upsampling_ratios.rend(); ++it) {
    Stage stage;
    int dilation = 1;
    for (int j = 0; j < c.num_residual_layers; ++j) {
      const int hidden = channels / c.compress;
      ResidualBlock block;
      block.first = load_conv(checkpoint, layer(index) + ".block.1.conv", channels, hidden, c.residual_kernel_size, 1,
                              dilation, true, false);
      block.second = load_conv(checkpoint, layer(index) + ".block.3.conv", hidden, channels, 1, 1, 1, true, false);
      stage.blocks.push_back(std::move(block));
      ++index;
      dilation *= c.dilation_growth_rate;
    }
    ++index;  // the ELU
    stage.down = load_conv(checkpoint, layer(index++) + ".conv", channels, channels * 2, *it * 2, *it, 1, true, false);
    channels *= 2;
    stages_.push_back(std::move(stage));
  }
  ++index;  // the ELU
  last_ = load_conv(checkpoint, layer(index) + ".conv", channels, c.hidden_size, c.last_kernel_size, 1, 1, true, false);

  const std::string tr = "encoder.encoder_transformer.layers.";
  const int64_t h = c.hidden_size, q_width = static_cast<int64_t>(c.num_attention_heads) * c.head_dim,
                kv_width = static_cast<int64_t>(c.num_key_value_heads) * c.head_dim;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = tr + std::to_string(i) + ".";
    TransformerLayer l;
    l.norm1_w = checkpoint.load_f32(p + "input_layernorm.weight", {h});
    l.norm1_b = checkpoint.load_f32(p + "input_layernorm.bias", {h});
    l.norm2_w = checkpoint.load_f32(p + "post_attention_layernorm.weight", {h});
    l.norm2_b = checkpoint.load_f32(p + "post_attention_layernorm.bias", {h});
    l.q = checkpoint.load_f32(p + "self_attn.q_proj.weight", {q_width, h});
    l.k = checkpoint.load_f32(p + "self_attn.k_proj.weight", {kv_width, h});
    l.v = checkpoint.load_f32(p + "self_attn.v_proj.weight", {kv_width, h});
    l.o = checkpoint.load_f32(p + "self_attn.o_proj.weight", {h, q_width});
    l.attn_scale = checkpoint.load_f32(p + "self_attn_layer_scale.scale", {h});
    l.mlp_scale = checkpoint.load_f32(p + "mlp_layer_scale.scale", {h});
    l.fc1 = checkpoint.load_f32(p + "mlp.fc1.weight", {c.intermediate_size, h});
    l.fc2 = checkpoint.load_f32(p + "mlp.fc2.weight", {h, c.intermediate_size});
    layers_.push_back(std::move(l));
  }
  const int stride = c.downsample_stride();
  downsample_ = load_conv(checkpoint, "encoder.downsample.conv", c.hidden_size, c.hidden_size, 2 * stride, stride, 1,
                          false, true);
  const std::string qz = "encoder.quantizer.";
  const int semantic = std::min(c.num_semantic_quantizers, c.valid_quantizers);
  semantic_ = load_quantizer(checkpoint, qz + "semantic_residual_vector_quantizer", semantic);
  acoustic_ = load_quantizer(checkpoint, qz + "acoustic_residual_vector_quantizer", c.valid_quantizers - semantic);
}

std::unique_ptr<SpeechEncoder> SpeechEncoder::load(const std::filesystem::path& dir) {
  std::optional<SpeechEncoderConfig> config = read_speech_encoder_config(dir);
  if (!config) return nullptr;
  return std::make_unique<SpeechEncoder>(Checkpoint::open(dir), std::move(*config));
}

int64_t SpeechEncoder::frames_for(int64_t samples) const {
  const int64_t per_frame = config_.samples_per_frame();
  return (samples + per_frame - 1) / per_frame;
}

namespace {

// `conv` over `x` as transformers' causal MimiConv1d: x padded by k_eff - stride rows in front and
// as many behind as complete the last window (zeros, or the edge rows), then the strided taps of
// each output row unfolded and multiplied with the weight in blocks of rows.
template <typename ConvT>
Rows apply_conv(const ConvT& conv, const Rows& x) {
  const int64_t k_eff = static_cast<int64_t>(conv.kernel - 1) * conv.dilation + 1;
  const int64_t left = k_eff - conv.stride;
  const int64_t out_rows = (x.t + conv.stride - 1) / conv.stride;
  auto source = [&](int64_t padded) -> const float* {
    const int64_t i = padded - left;
    if (i < 0) return conv.replicate ? x.row(0) : nullptr;
    if (i >= x.t) return conv.replicate ? x.row(x.t - 1) : nullptr;
    return x.row(i);
  };
  Rows y(out_rows, conv.out);
  const int64_t width = static_cast<int64_t>(conv.kernel) * conv.in;
  std::vector<float, Uninitialised<float>> unfolded;
  for (int64_t t0 = 0; t0 < out_rows; t0 += kConvBlockRows) {
    const int64_t n = std::min(kConvBlockRows, out_rows - t0);
    unfolded.resize(static_cast<size_t>(n * width));
    parallel_for(n, std::max<int64_t>(1, kElementGrain / width), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        for (int j = 0; j < conv.kernel; ++j) {
          const float* s = source((t0 + t) * conv.stride + static_cast<int64_t>(j) * conv.dilation);
          float* d = unfolded.data() + t * width + static_cast<int64_t>(j) * conv.in;
          if (s) {
            std::copy_n(s, conv.in, d);
          } else {
            std::fill_n(d, conv.in, 0.0f);
          }
        }
      }
    });
    const Tensor in = Tensor::borrow(unfolded.data(), {n, width}, DType::kF32);
    Tensor out = Tensor::borrow(y.row(t0), {n, conv.out}, DType::kF32);
    tensor::ops::linear(in, conv.weight, conv.bias, out);
  }
  return y;
}

// The NeoX rotary tables of positions 0..steps-1: cos and sin [steps, head_dim / 2].
struct Rotation {
  std::vector<float> cosines, sines;
  Rotation(int64_t steps, int head_dim, double theta) {
    const int half = head_dim / 2;
    cosines.resize(static_cast<size_t>(steps * half));
    sines.resize(cosines.size());
    for (int64_t t = 0; t < steps; ++t) {
      for (int i = 0; i < half; ++i) {
        const float inv_freq = static_cast<float>(std::pow(theta, -2.0 * i / head_dim));
        const float angle = static_cast<float>(t) * inv_freq;
        cosines[t * half + i] = std::cos(angle);
        sines[t * half + i] = std::sin(angle);
      }
    }
  }
};

// NeoX rotary embedding of `x` [steps, heads * head_dim] in place with `rotation`'s tables.
void rotate(std::vector<float>& x, int64_t steps, int heads, int head_dim, const Rotation& rotation) {
  const int half = head_dim / 2;
  parallel_for(steps, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* cosines = rotation.cosines.data() + t * half;
      const float* sines = rotation.sines.data() + t * half;
      for (int h = 0; h < heads; ++h) {
        float* v = x.data() + (t * heads + h) * head_dim;
        for (int i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half], c = cosines[i], s = sines[i];
          v[i] = a * c - b * s;
          v[i + half] = b * c + a * s;
        }
      }
    }
  });
}

}  // namespace

void SpeechEncoder::transformer(std::span<float> x, int64_t steps) const {
  const SpeechEncoderConfig& c = config_;
  const int64_t h = c.hidden_size, nh = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim;
  const int64_t group = nh / nkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  Tensor xt = Tensor::borrow(x.data(), {steps, h}, DType::kF32);
  Tensor normed = Tensor::empty({steps, h}, DType::kF32);
  std::vector<float> q(static_cast<size_t>(steps * nh * hd)), k(static_cast<size_t>(steps * nkv * hd)), v(k.size()),
      attended(q.size());
  const Rotation rotation(steps, static_cast<int>(hd), c.rope_theta);
  Tensor qt = Tensor::borrow(q.data(), {steps, nh * hd}, DType::kF32);
  Tensor kt = Tensor::borrow(k.data(), {steps, nkv * hd}, DType::kF32);
  Tensor vt = Tensor::borrow(v.data(), {steps, nkv * hd}, DType::kF32);
  Tensor at = Tensor::borrow(attended.data(), {steps, nh * hd}, DType::kF32);
  Tensor branch = Tensor::empty({steps, h}, DType::kF32);
  Tensor hidden = Tensor::empty({steps, c.intermediate_size}, DType::kF32);
  for (const TransformerLayer& l : layers_) {
    tensor::ops::layer_norm(xt, l.norm1_w, l.norm1_b, c.norm_eps, normed);
    tensor::ops::linear(normed, l.q, Tensor(), qt);
    tensor::ops::linear(normed, l.k, Tensor(), kt);
    tensor::ops::linear(normed, l.v, Tensor(), vt);
    rotate(q, steps, static_cast<int>(nh), static_cast<int>(hd), rotation);
    rotate(k, steps, static_cast<int>(nkv), static_cast<int>(hd), rotation);
    // Causal attention over the current step and the sliding_window - 1 before it, each (head,
    // step) on its own.
    parallel_for(nh * steps, 16, [&](int64_t begin, int64_t end) {
      std::vector<float> scores(static_cast<size_t>(steps));
      for (int64_t item = begin; item < end; ++item) {
        const int64_t head = item / steps, i = item % steps;
        const int64_t kv_head = head / group;
        const int64_t first = std::max<int64_t>(0, i - c.sliding_window + 1);
        const float* qi = q.data() + (i * nh + head) * hd;
        float peak = -INFINITY;
        for (int64_t j = first; j <= i; ++j) {
          const float* kj = k.data() + (j * nkv + kv_head) * hd;
          float dot = 0;
          for (int64_t d = 0; d < hd; ++d) dot += qi[d] * kj[d];
          scores[j] = dot * scale;
          peak = std::max(peak, scores[j]);
        }
        double z = 0;
        for (int64_t j = first; j <= i; ++j) {
          scores[j] = std::exp(scores[j] - peak);
          z += scores[j];
        }
        float* out = attended.data() + (i * nh + head) * hd;
        std::fill_n(out, hd, 0.0f);
        for (int64_t j = first; j <= i; ++j) {
          const float p = static_cast<float>(scores[j] / z);
          const float* vj = v.data() + (j * nkv + kv_head) * hd;
          for (int64_t d = 0; d < hd; ++d) out[d] += p * vj[d];
        }
      }
    });
    tensor::ops::linear(at, l.o, Tensor(), branch);
    const float* b = branch.data<float>();
    add_into(x, b, l.attn_scale.data<float>(), h);
    tensor::ops::layer_norm(xt, l.norm2_w, l.norm2_b, c.norm_eps, normed);
    tensor::ops::linear(normed, l.fc1, Tensor(), hidden);
    tensor::ops::gelu(hidden, tensor::ops::GeluApproximation::kNone, hidden);
    tensor::ops::linear(hidden, l.fc2, Tensor(), branch);
    add_into(x, b, l.mlp_scale.data<float>(), h);
  }
}

void SpeechEncoder::quantize(const Quantizer& quantizer, std::span<const float> x, int64_t frames, int count, int first,
                             std::vector<int32_t>& codes) const {
  const SpeechEncoderConfig& c = config_;
  const int64_t dim = c.codebook_dim, entries = c.codebook_size;
  std::vector<float> residual(static_cast<size_t>(frames * dim));
  Tensor rt = Tensor::borrow(residual.data(), {frames, dim}, DType::kF32);
  if (quantizer.input_proj.defined()) {
    tensor::ops::linear(Tensor::borrow(const_cast<float*>(x.data()), {frames, c.hidden_size}, DType::kF32),
                        quantizer.input_proj, Tensor(), rt);
  } else {
    std::copy(x.begin(), x.end(), residual.begin());
  }
  Tensor dots = Tensor::empty({frames, entries}, DType::kF32);
  for (int l = 0; l < count; ++l) {
    const Tensor& table = quantizer.codebooks[l];
    const std::vector<double>& norms = quantizer.norms[l];
    tensor::ops::linear(rt, table, Tensor(), dots);
    parallel_for(frames, 4, [&](int64_t first_frame, int64_t end_frame) {
      std::vector<double> approx(static_cast<size_t>(entries));
      for (int64_t f = first_frame; f < end_frame; ++f) {
        float* r = residual.data() + f * dim;
        // |r - e|^2 - |r|^2 = |e|^2 - 2 r.e from the product; entries within rounding of the best are
        // measured again exactly, so that the choice does not hang on the product's rounding.
        const float* row = dots.data<float>() + f * entries;
        double best = INFINITY, magnitude = 0;
        for (int64_t d = 0; d < dim; ++d) magnitude += static_cast<double>(r[d]) * r[d];
        for (int64_t n = 0; n < entries; ++n) {
          approx[n] = norms[n] - 2.0 * row[n];
          best = std::min(best, approx[n]);
        }
        const double tolerance = 1e-4 * (magnitude + std::abs(best) + 1.0);
        int64_t chosen = -1;
        double chosen_distance = INFINITY;
        for (int64_t n = 0; n < entries; ++n) {
          if (approx[n] > best + tolerance) continue;
          const float* e = table.data<float>() + n * dim;
          double distance = 0;
          for (int64_t d = 0; d < dim; ++d) {
            const double diff = static_cast<double>(r[d]) - e[d];
            distance += diff * diff;
          }
          if (distance < chosen_distance) {
            chosen_distance = distance;
            chosen = n;
          }
        }
        codes[f * c.valid_quantizers + first + l] = static_cast<int32_t>(chosen);
        const float* e = table.data<float>() + chosen * dim;
        for (int64_t d = 0; d < dim; ++d) r[d] -= e[d];
      }
    });
  }
}

std::vector<int32_t> SpeechEncoder::encode(std::span<const float> samples, Activations* activations) const {
  if (samples.empty()) throw_error(ErrorCode::kInvalidArgument, "the speech encoder got no audio samples");
  Rows x(static_cast<int64_t>(samples.size()), 1);
  std::copy(samples.begin(), samples.end(), x.v.begin());
  x = apply_conv(first_, x);
  for (const Stage& stage : stages_) {
    for (const ResidualBlock& block : stage.blocks) {
      Rows h = elu_of(x);
      h = apply_conv(block.first, h);
      elu(h.v);
      h = apply_conv(block.second, h);
      add_into(x.v, h.v.data(), nullptr, x.c);
    }
    elu(x.v);
    x = apply_conv(stage.down, x);
  }
  elu(x.v);
  x = apply_conv(last_, x);
  if (activations) activations->convolutions.assign(x.v.begin(), x.v.end());
  transformer(x.v, x.t);
  if (activations) activations->transformer.assign(x.v.begin(), x.v.end());
  x = apply_conv(downsample_, x);
  if (activations) activations->downsampled.assign(x.v.begin(), x.v.end());

  const int64_t frames = x.t;
  std::vector<int32_t> codes(static_cast<size_t>(frames * config_.valid_quantizers));
  const int semantic = static_cast<int>(semantic_.codebooks.size());
  quantize(semantic_, x.v, frames, semantic, 0, codes);
  quantize(acoustic_, x.v, frames, static_cast<int>(acoustic_.codebooks.size()), semantic, codes);
  return codes;
}

}  // namespace omni::model::qwen3_tts
