#include "model/z_image/vae_decoder.h"

#include <cmath>

#include "base/error.h"
#include "model/safetensors.h"
#include "tensor/ops.h"

namespace omni::model::z_image {

using tensor::DType;
using tensor::Tensor;
namespace ops = tensor::ops;

namespace {

constexpr float kNormEps = 1e-6f;  // every GroupNorm of the decoder

Tensor f32(tensor::Shape shape) { return Tensor::empty(std::move(shape), DType::kF32); }

}  // namespace

VaeDecoder::VaeDecoder(const std::filesystem::path& dir, const VaeDecoderConfig& config, const Placement& placement,
                       bool use_tiling)
    : config_(config), placement_(placement) {
  if (use_tiling) tiling_ = VaeTiling::of(config.sample_size, config.scale_factor());
  const Checkpoint ckpt = Checkpoint::open(dir / "vae", "diffusion_pytorch_model");
  auto load = [&](const std::string& name, const tensor::Shape& shape) {
    return ckpt.load(name, shape, placement_.dtype, placement_.device);
  };
  auto load_conv = [&](const std::string& name, int64_t out, int64_t in, int64_t k) {
    return Conv{load(name + ".weight", {out, in, k, k}), load(name + ".bias", {out})};
  };
  auto load_norm = [&](const std::string& name, int64_t channels) {
    return Norm{load(name + ".weight", {channels}), load(name + ".bias", {channels})};
  };
  auto load_resnet = [&](const std::string& name, int64_t in, int64_t out) {
    ResNet r;
    r.norm1 = load_norm(name + ".norm1", in);
    r.conv1 = load_conv(name + ".conv1", out, in, 3);
    r.norm2 = load_norm(name + ".norm2", out);
    r.conv2 = load_conv(name + ".conv2", out, out, 3);
    if (in != out) r.shortcut = load_conv(name + ".conv_shortcut", out, in, 1);
    return r;
  };
  const int64_t latent = config.latent_channels;
  const auto& channels = config.block_out_channels;
  const int64_t top = channels.back();
  if (config.use_post_quant_conv) post_quant_conv_ = load_conv("post_quant_conv", latent, latent, 1);
  conv_in_ = load_conv("decoder.conv_in", top, latent, 3);
  mid_resnet0_ = load_resnet("decoder.mid_block.resnets.0", top, top);
  mid_resnet1_ = load_resnet("decoder.mid_block.resnets.1", top, top);
  has_mid_attention_ = config.mid_block_add_attention;
  if (has_mid_attention_) {
    const std::string a = "decoder.mid_block.attentions.0.";
    mid_attention_.norm = load_norm(a + "group_norm", top);
    mid_attention_.q_w = load(a + "to_q.weight", {top, top});
    mid_attention_.q_b = load(a + "to_q.bias", {top});
    mid_attention_.k_w = load(a + "to_k.weight", {top, top});
    mid_attention_.k_b = load(a + "to_k.bias", {top});
    mid_attention_.v_w = load(a + "to_v.weight", {top, top});
    mid_attention_.v_b = load(a + "to_v.bias", {top});
    mid_attention_.out_w = load(a + "to_out.0.weight", {top, top});
    mid_attention_.out_b = load(a + "to_out.0.bias", {top});
  }
  int64_t prev = top;
  const int blocks = static_cast<int>(channels.size());
  for (int i = 0; i < blocks; ++i) {
    const int64_t out = channels[blocks - 1 - i];
    UpBlock block;
    for (int j = 0; j <= config.layers_per_block; ++j) {
      block.resnets.push_back(
          load_resnet(fmt::format("decoder.up_blocks.{}.resnets.{}", i, j), j == 0 ? prev : out, out));
    }
    if (i + 1 < blocks)
      block.upsample = load_conv(fmt::format("decoder.up_blocks.{}.upsamplers.0.conv", i), out, out, 3);
    up_blocks_.push_back(std::move(block));
    prev = out;
  }
  norm_out_ = load_norm("decoder.conv_norm_out", channels.front());
  conv_out_ = load_conv("decoder.conv_out", config.out_channels, channels.front(), 3);
}

Tensor VaeDecoder::activation(tensor::Shape shape) const {
  return Tensor::empty(std::move(shape), placement_.dtype, placement_.device);
}

Tensor VaeDecoder::conv(const Tensor& x, const Conv& c) const {
  const int64_t k = c.weight.dim(2);
  const int pad = static_cast<int>(k / 2);
  Tensor out = activation({x.dim(0), x.dim(1), c.weight.dim(0)});
  ops::conv2d(x, c.weight, c.bias, pad, /*stride=*/1, out);
  return out;
}

Tensor VaeDecoder::norm_silu(const Tensor& x, const Norm& n) const {
  Tensor out = activation(x.shape());
  const Tensor flat_in = x.reshape({x.dim(0) * x.dim(1), x.dim(2)});
  Tensor flat_out = out.reshape({x.dim(0) * x.dim(1), x.dim(2)});
  ops::group_norm(flat_in, config_.norm_num_groups, n.weight, n.bias, kNormEps, flat_out);
  ops::silu(out, out);
  return out;
}

Tensor VaeDecoder::resnet(const Tensor& x, const ResNet& r) const {
  Tensor h = conv(norm_silu(x, r.norm1), r.conv1);
  h = conv(norm_silu(h, r.norm2), r.conv2);
  const Tensor skip = r.shortcut.weight.defined() ? conv(x, r.shortcut) : x;
  ops::add(h, skip, h);
  return h;
}

Tensor VaeDecoder::attention(const Tensor& x, const Attention& a) const {
  const int64_t pixels = x.dim(0) * x.dim(1), c = x.dim(2);
  const Tensor flat = x.reshape({pixels, c});
  Tensor normed = activation({pixels, c});
  ops::group_norm(flat, config_.norm_num_groups, a.norm.weight, a.norm.bias, kNormEps, normed);
  Tensor q = activation({pixels, c}), k = activation({pixels, c}), v = activation({pixels, c});
  ops::linear(normed, a.q_w, a.q_b, q);
  ops::linear(normed, a.k_w, a.k_b, k);
  ops::linear(normed, a.v_w, a.v_b, v);
  Tensor attn = activation({pixels, 1, c});
  ops::attention(q.reshape({pixels, 1, c}), k.reshape({pixels, 1, c}), v.reshape({pixels, 1, c}),
                 1.0f / std::sqrt(static_cast<float>(c)), attn);
  Tensor out = activation(x.shape());
  Tensor out_flat = out.reshape({pixels, c});
  ops::linear(attn.reshape({pixels, c}), a.out_w, a.out_b, out_flat);
  ops::add(out, x, out);
  return out;
}

Tensor VaeDecoder::decode(const Tensor& latents) const {
  if (latents.rank() != 3 || latents.dim(0) != config_.latent_channels) {
    throw_error(ErrorCode::kInvalidArgument, "vae decoder: latents must be [{}, h, w], got {}", config_.latent_channels,
                tensor::shape_to_string(latents.shape()));
  }
  const int64_t c = latents.dim(0), h = latents.dim(1), w = latents.dim(2);
  // Channels-last, unscaled: z / scaling_factor + shift_factor, before any tiling (as the pipeline).
  Tensor host = f32({h, w, c});
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t i = 0; i < h * w; ++i)
      host.data<float>()[i * c + ch] =
          latents.data<float>()[ch * h * w + i] / config_.scaling_factor + config_.shift_factor;
  if (tiling_ && tiling_->applies(h, w)) {
    return tiled_decode(host, *tiling_, [this](const Tensor& tile) { return decode_scaled(tile); });
  }
  return decode_scaled(host);
}

Tensor VaeDecoder::decode_scaled(const Tensor& latents_hwc) const {
  Tensor x = place(latents_hwc, placement_.dtype, placement_.device);
  if (post_quant_conv_.weight.defined()) x = conv(x, post_quant_conv_);
  x = conv(x, conv_in_);
  x = resnet(x, mid_resnet0_);
  if (has_mid_attention_) x = attention(x, mid_attention_);
  x = resnet(x, mid_resnet1_);
  for (const UpBlock& block : up_blocks_) {
    for (const ResNet& r : block.resnets) x = resnet(x, r);
    if (block.upsample.weight.defined()) {
      Tensor up = activation({2 * x.dim(0), 2 * x.dim(1), x.dim(2)});
      ops::upsample_nearest2x(x, up);
      x = conv(up, block.upsample);
    }
  }
  return host_f32(conv(norm_silu(x, norm_out_), conv_out_));
}

}  // namespace omni::model::z_image
