#include "model/whisper_layers.h"

#include <cmath>

#include "model/safetensors.h"
#include "tensor/ops.h"

namespace omni::model {

using tensor::Tensor;
namespace ops = tensor::ops;

namespace {

constexpr float kLayerNormEps = 1e-5f;

}  // namespace

WhisperLayers::WhisperLayers(const Checkpoint& ckpt, const std::string& prefix, const Shape& shape,
                             const Placement& placement)
    : shape_(shape), placement_(placement) {
  const int64_t d = shape.d_model, ffn = shape.ffn_dim;
  auto weight = [&](const std::string& name, const tensor::Shape& dims) {
    return ckpt.load(name, dims, placement_.dtype, placement_.device);
  };
  for (int l = 0; l < shape.num_layers; ++l) {
    const std::string p = prefix + "layers." + std::to_string(l) + ".";
    Layer layer;
    layer.attn_norm_w = weight(p + "self_attn_layer_norm.weight", {d});
    layer.attn_norm_b = weight(p + "self_attn_layer_norm.bias", {d});
    layer.q_w = weight(p + "self_attn.q_proj.weight", {d, d});
    layer.q_b = weight(p + "self_attn.q_proj.bias", {d});
    layer.k_w = weight(p + "self_attn.k_proj.weight", {d, d});
    if (shape.k_bias) layer.k_b = weight(p + "self_attn.k_proj.bias", {d});
    layer.v_w = weight(p + "self_attn.v_proj.weight", {d, d});
    layer.v_b = weight(p + "self_attn.v_proj.bias", {d});
    layer.out_w = weight(p + "self_attn.out_proj.weight", {d, d});
    layer.out_b = weight(p + "self_attn.out_proj.bias", {d});
    layer.mlp_norm_w = weight(p + "final_layer_norm.weight", {d});
    layer.mlp_norm_b = weight(p + "final_layer_norm.bias", {d});
    layer.fc1_w = weight(p + "fc1.weight", {ffn, d});
    layer.fc1_b = weight(p + "fc1.bias", {ffn});
    layer.fc2_w = weight(p + "fc2.weight", {d, ffn});
    layer.fc2_b = weight(p + "fc2.bias", {d});
    layers_.push_back(std::move(layer));
  }
}

void WhisperLayers::run(Tensor& h, std::span<const int64_t> windows) const {
  const int64_t total = h.dim(0), d = shape_.d_model, heads = shape_.heads, hd = d / heads;
  const tensor::DType dtype = h.dtype();
  const tensor::Device device = h.device();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  Tensor x = Tensor::empty({total, d}, dtype, device), attn = Tensor::empty({total, d}, dtype, device);
  Tensor q = Tensor::empty({total, d}, dtype, device), k = Tensor::empty({total, d}, dtype, device);
  Tensor v = Tensor::empty({total, d}, dtype, device), branch = Tensor::empty({total, d}, dtype, device);
  Tensor up = Tensor::empty({total, shape_.ffn_dim}, dtype, device);
  for (const Layer& l : layers_) {
    ops::layer_norm(h, l.attn_norm_w, l.attn_norm_b, kLayerNormEps, x);
    ops::linear(x, l.q_w, l.q_b, q);
    ops::linear(x, l.k_w, l.k_b, k);
    ops::linear(x, l.v_w, l.v_b, v);
    int64_t start = 0;
    for (int64_t w : windows) {
      const auto heads_of = [&](const Tensor& t) { return t.slice_rows(start, start + w).reshape({w, heads, hd}); };
      Tensor out = heads_of(attn);
      ops::attention(heads_of(q), heads_of(k), heads_of(v), scale, out);
      start += w;
    }
    ops::linear(attn, l.out_w, l.out_b, branch);
    ops::add(h, branch, h);
    ops::layer_norm(h, l.mlp_norm_w, l.mlp_norm_b, kLayerNormEps, x);
    ops::linear(x, l.fc1_w, l.fc1_b, up);
    ops::gelu(up, ops::GeluApproximation::kNone, up);
    ops::linear(up, l.fc2_w, l.fc2_b, branch);
    ops::add(h, branch, h);
  }
}

}  // namespace omni::model
