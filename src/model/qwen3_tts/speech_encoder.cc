#include "model/qwen3_tts/speech_encoder.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "base/error.h"
#include "model/tap_major.h"
#include "tensor/ops.h"

namespace omni::model::qwen3_tts {

using tensor::DType;
using tensor::Tensor;
namespace ops = tensor::ops;

namespace {

// Output rows unfolded at a time: bounds the unfolded input's memory for long references. The CPU
// keeps a block in its caches; a CUDA device takes up to 16 Mi elements, in few launches.
int64_t conv_block_rows(const tensor::Device& device, int64_t width) {
  constexpr int64_t kCpuRows = 1024, kDeviceElements = int64_t{1} << 24;
  return device.type == tensor::DeviceType::kCpu ? kCpuRows : std::max(kCpuRows, kDeviceElements / width);
}

Tensor like(const Tensor& x) { return Tensor::empty(x.shape(), x.dtype(), x.device()); }

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
  conv.weight = tap_major_weight(checkpoint.load_f32(name + ".weight", {out, in, kernel})).to(device_);
  if (bias) conv.bias = checkpoint.load_f32(name + ".bias", {out}).to(device_);
  return conv;
}

SpeechEncoder::Quantizer SpeechEncoder::load_quantizer(const Checkpoint& checkpoint, const std::string& name,
                                                       int layers) const {
  const SpeechEncoderConfig& c = config_;
  Quantizer q;
  if (c.codebook_dim != c.hidden_size) {
    q.input_proj = checkpoint.load_f32(name + ".input_proj.weight", {c.codebook_dim, c.hidden_size, 1});
    q.input_proj = q.input_proj.reshape({c.codebook_dim, c.hidden_size}).to(device_);
  }
  for (int l = 0; l < layers; ++l) {
    const std::string prefix = name + ".layers." + std::to_string(l) + ".codebook.";
    Tensor table = checkpoint.load_f32(prefix + "embed_sum", {c.codebook_size, c.codebook_dim});
    const Tensor usage = checkpoint.load_f32(prefix + "cluster_usage", {c.codebook_size});
    Tensor norms = Tensor::empty({c.codebook_size}, DType::kF32);
    float* t = table.data<float>();
    for (int n = 0; n < c.codebook_size; ++n) {
      const float divisor = std::max(usage.data<float>()[n], 1e-5f);
      double norm = 0;
      for (int d = 0; d < c.codebook_dim; ++d) {
        float& e = t[static_cast<int64_t>(n) * c.codebook_dim + d];
        e /= divisor;
        norm += static_cast<double>(e) * e;
      }
      norms.data<float>()[n] = static_cast<float>(norm);
    }
    q.codebooks.push_back(table.to(device_));
    q.norms.push_back(norms.to(device_));
  }
  return q;
}

SpeechEncoder::SpeechEncoder(const Checkpoint& checkpoint, SpeechEncoderConfig config, tensor::Device device)
    : config_(std::move(config)), device_(device) {
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
    auto load = [&](const std::string& name, const tensor::Shape& shape) {
      return checkpoint.load_f32(p + name, shape).to(device_);
    };
    TransformerLayer l;
    l.norm1_w = load("input_layernorm.weight", {h});
    l.norm1_b = load("input_layernorm.bias", {h});
    l.norm2_w = load("post_attention_layernorm.weight", {h});
    l.norm2_b = load("post_attention_layernorm.bias", {h});
    l.q = load("self_attn.q_proj.weight", {q_width, h});
    l.k = load("self_attn.k_proj.weight", {kv_width, h});
    l.v = load("self_attn.v_proj.weight", {kv_width, h});
    l.o = load("self_attn.o_proj.weight", {h, q_width});
    l.attn_scale = load("self_attn_layer_scale.scale", {h});
    l.mlp_scale = load("mlp_layer_scale.scale", {h});
    l.fc1 = load("mlp.fc1.weight", {c.intermediate_size, h});
    l.fc2 = load("mlp.fc2.weight", {h, c.intermediate_size});
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

std::unique_ptr<SpeechEncoder> SpeechEncoder::load(const std::filesystem::path& dir, tensor::Device device) {
  std::optional<SpeechEncoderConfig> config = read_speech_encoder_config(dir);
  if (!config) return nullptr;
  return std::make_unique<SpeechEncoder>(Checkpoint::open(dir), std::move(*config), device);
}

int64_t SpeechEncoder::frames_for(int64_t samples) const {
  const int64_t per_frame = config_.samples_per_frame();
  return (samples + per_frame - 1) / per_frame;
}

Tensor SpeechEncoder::apply(const Conv& conv, const Tensor& x) const {
  // transformers' causal MimiConv1d: k_eff - stride rows of padding in front and as many behind as
  // complete the last window (zeros, or the edge rows).
  const int64_t k_eff = static_cast<int64_t>(conv.kernel - 1) * conv.dilation + 1;
  const int64_t out_rows = (x.dim(0) + conv.stride - 1) / conv.stride;
  const int64_t width = static_cast<int64_t>(conv.kernel) * conv.in;
  const auto padding = conv.replicate ? ops::RowPadding::kReplicate : ops::RowPadding::kZeros;
  Tensor y = Tensor::empty({out_rows, conv.out}, DType::kF32, device_);
  const int64_t block = std::min(out_rows, conv_block_rows(device_, width));
  Tensor unfolded = Tensor::empty({block, width}, DType::kF32, device_);
  for (int64_t t0 = 0; t0 < out_rows; t0 += block) {
    const int64_t n = std::min(block, out_rows - t0);
    Tensor in = unfolded.slice_rows(0, n);
    ops::unfold_rows(x, conv.kernel, conv.stride, conv.dilation, k_eff - conv.stride, padding, t0, in);
    Tensor out = y.slice_rows(t0, t0 + n);
    ops::linear(in, conv.weight, conv.bias, out);
  }
  return y;
}

void SpeechEncoder::transformer(Tensor& x) const {
  const SpeechEncoderConfig& c = config_;
  const int64_t steps = x.dim(0), h = c.hidden_size, nh = c.num_attention_heads, nkv = c.num_key_value_heads,
                hd = c.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Causal attention over the current step and the sliding_window - 1 before it: one sequence
  // whose keys are the layer's own k and v, read as one-row blocks.
  std::vector<int32_t> table(static_cast<size_t>(steps));
  Tensor host_positions = Tensor::empty({steps}, DType::kI32);
  for (int64_t t = 0; t < steps; ++t) table[t] = host_positions.data<int32_t>()[t] = static_cast<int32_t>(t);
  const Tensor positions = host_positions.to(device_);  // uploaded once for every layer
  const ops::PagedSequence sequence{0, static_cast<int32_t>(steps), 0, table};
  ops::RopeSpec rope;
  rope.theta = c.rope_theta;
  Tensor normed = like(x), branch = like(x);
  Tensor q = Tensor::empty({steps, nh, hd}, DType::kF32, device_);
  Tensor k = Tensor::empty({steps, nkv, hd}, DType::kF32, device_), v = like(k), attended = like(q);
  Tensor hidden = Tensor::empty({steps, c.intermediate_size}, DType::kF32, device_);
  Tensor q_rows = q.reshape({steps, nh * hd}), k_rows = k.reshape({steps, nkv * hd}),
         v_rows = v.reshape(k_rows.shape());
  const Tensor k_cache = k.reshape({steps, 1, nkv, hd}), v_cache = v.reshape({steps, 1, nkv, hd});
  const Tensor attended_rows = attended.reshape({steps, nh * hd});
  for (const TransformerLayer& l : layers_) {
    ops::layer_norm(x, l.norm1_w, l.norm1_b, c.norm_eps, normed);
    ops::linear(normed, l.q, Tensor(), q_rows);
    ops::linear(normed, l.k, Tensor(), k_rows);
    ops::linear(normed, l.v, Tensor(), v_rows);
    ops::rotary_embedding(q, positions, rope);
    ops::rotary_embedding(k, positions, rope);
    ops::paged_attention(q, k_cache, v_cache, std::span(&sequence, 1), scale, c.sliding_window, attended);
    ops::linear(attended_rows, l.o, Tensor(), branch);
    ops::add_scaled(x, branch, l.attn_scale, x);
    ops::layer_norm(x, l.norm2_w, l.norm2_b, c.norm_eps, normed);
    ops::linear(normed, l.fc1, Tensor(), hidden);
    ops::gelu(hidden, ops::GeluApproximation::kNone, hidden);
    ops::linear(hidden, l.fc2, Tensor(), branch);
    ops::add_scaled(x, branch, l.mlp_scale, x);
  }
}

void SpeechEncoder::quantize(const Quantizer& quantizer, const Tensor& x, int first, Tensor& codes) const {
  const int64_t frames = x.dim(0);
  Tensor residual;
  if (quantizer.input_proj.defined()) {
    residual = Tensor::empty({frames, config_.codebook_dim}, DType::kF32, device_);
    ops::linear(x, quantizer.input_proj, Tensor(), residual);
  } else {
    residual = x.to(device_);
  }
  Tensor dots = Tensor::empty({frames, config_.codebook_size}, DType::kF32, device_);
  for (size_t l = 0; l < quantizer.codebooks.size(); ++l) {
    ops::linear(residual, quantizer.codebooks[l], Tensor(), dots);
    ops::nearest_codes(residual, quantizer.codebooks[l], quantizer.norms[l], dots, codes,
                       first + static_cast<int64_t>(l));
  }
}

std::vector<int32_t> SpeechEncoder::encode(std::span<const float> samples, Activations* activations) const {
  if (samples.empty()) throw_error(ErrorCode::kInvalidArgument, "the speech encoder got no audio samples");
  auto host_copy = [](const Tensor& t, std::vector<float>& into) {
    const Tensor h = t.to(tensor::Device::cpu());
    into.assign(h.data<float>(), h.data<float>() + h.numel());
  };
  Tensor x = Tensor::borrow(const_cast<float*>(samples.data()), {static_cast<int64_t>(samples.size()), 1}, DType::kF32)
                 .to(device_);
  x = apply(first_, x);
  for (const Stage& stage : stages_) {
    for (const ResidualBlock& block : stage.blocks) {
      Tensor h = like(x);
      ops::elu(x, h);
      h = apply(block.first, h);
      ops::elu(h, h);
      h = apply(block.second, h);
      ops::add(x, h, x);
    }
    ops::elu(x, x);
    x = apply(stage.down, x);
  }
  ops::elu(x, x);
  x = apply(last_, x);
  if (activations) host_copy(x, activations->convolutions);
  transformer(x);
  if (activations) host_copy(x, activations->transformer);
  x = apply(downsample_, x);
  if (activations) host_copy(x, activations->downsampled);

  Tensor codes = Tensor::empty({x.dim(0), config_.valid_quantizers}, DType::kI32, device_);
  const int semantic = static_cast<int>(semantic_.codebooks.size());
  quantize(semantic_, x, 0, codes);
  quantize(acoustic_, x, semantic, codes);
  const Tensor host = codes.to(tensor::Device::cpu());
  return std::vector<int32_t>(host.data<int32_t>(), host.data<int32_t>() + host.numel());
}

}  // namespace omni::model::qwen3_tts
