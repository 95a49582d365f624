#include "model/z_image/transformer.h"

#include <cmath>
#include <cstring>

#include "base/error.h"
#include "model/safetensors.h"
#include "tensor/ops.h"

namespace omni::model::z_image {

using tensor::DType;
using tensor::Tensor;
namespace ops = tensor::ops;

namespace {

constexpr int kFrequencyEmbedding = 256;  // the timestep's sinusoidal features
constexpr int kTimestepMlp = 1024;        // the timestep MLP's hidden width

Tensor f32(tensor::Shape shape) { return Tensor::empty(std::move(shape), DType::kF32); }

// Rows [begin, end) of a [rows, d] tensor as a [end - begin, d] tensor sharing its storage.
Tensor rows(const Tensor& t, int64_t begin, int64_t end) { return t.slice_rows(begin, end); }

int64_t padded(int64_t n) { return n + (kSequenceMultiple - n % kSequenceMultiple) % kSequenceMultiple; }

}  // namespace

Transformer::Transformer(const std::filesystem::path& dir, const TransformerConfig& config) : config_(config) {
  const Checkpoint ckpt = Checkpoint::open(dir / "transformer", "diffusion_pytorch_model");
  const int64_t dim = config.dim, adaln = config.adaln_dim();
  const std::string patch = std::to_string(config.patch_size) + "-1";
  t_mlp0_w_ = ckpt.load_f32("t_embedder.mlp.0.weight", {kTimestepMlp, kFrequencyEmbedding});
  t_mlp0_b_ = ckpt.load_f32("t_embedder.mlp.0.bias", {kTimestepMlp});
  t_mlp2_w_ = ckpt.load_f32("t_embedder.mlp.2.weight", {adaln, kTimestepMlp});
  t_mlp2_b_ = ckpt.load_f32("t_embedder.mlp.2.bias", {adaln});
  cap_norm_ = ckpt.load_f32("cap_embedder.0.weight", {config.cap_feat_dim});
  cap_w_ = ckpt.load_f32("cap_embedder.1.weight", {dim, config.cap_feat_dim});
  cap_b_ = ckpt.load_f32("cap_embedder.1.bias", {dim});
  x_embed_w_ = ckpt.load_f32("all_x_embedder." + patch + ".weight", {dim, config.patch_features()});
  x_embed_b_ = ckpt.load_f32("all_x_embedder." + patch + ".bias", {dim});
  x_pad_ = ckpt.load_f32("x_pad_token", {1, dim});
  cap_pad_ = ckpt.load_f32("cap_pad_token", {1, dim});
  const std::string final_layer = "all_final_layer." + patch + ".";
  final_mod_w_ = ckpt.load_f32(final_layer + "adaLN_modulation.1.weight", {dim, adaln});
  final_mod_b_ = ckpt.load_f32(final_layer + "adaLN_modulation.1.bias", {dim});
  final_w_ = ckpt.load_f32(final_layer + "linear.weight", {config.patch_features(), dim});
  final_b_ = ckpt.load_f32(final_layer + "linear.bias", {config.patch_features()});
  ones_ = f32({dim});
  zeros_ = Tensor::zeros({dim}, DType::kF32);
  std::fill_n(ones_.data<float>(), dim, 1.0f);
  for (int i = 0; i < config.n_refiner_layers; ++i) {
    noise_refiner_.push_back(load_block(ckpt, "noise_refiner." + std::to_string(i) + ".", true));
    context_refiner_.push_back(load_block(ckpt, "context_refiner." + std::to_string(i) + ".", false));
  }
  for (int i = 0; i < config.n_layers; ++i) layers_.push_back(load_block(ckpt, "layers." + std::to_string(i) + ".", true));
  // Each axis's frequencies theta^(-2k/d), in float64 as diffusers precomputes them.
  for (int a = 0; a < 3; ++a) {
    const int d = config.axes_dims[a];
    for (int k = 0; k < d / 2; ++k) {
      axis_freqs_[a].push_back(1.0 / std::pow(static_cast<double>(config.rope_theta), 2.0 * k / d));
    }
  }
}

Transformer::Block Transformer::load_block(const Checkpoint& ckpt, const std::string& prefix, bool modulated) const {
  const int64_t dim = config_.dim, ffn = config_.ffn_dim(), hd = config_.head_dim();
  Block b;
  b.qkv = f32({3 * dim, dim});
  const char* qkv_names[] = {"attention.to_q.weight", "attention.to_k.weight", "attention.to_v.weight"};
  for (int i = 0; i < 3; ++i) ckpt.load_f32_into(prefix + qkv_names[i], {dim, dim}, b.qkv.data<float>() + i * dim * dim);
  b.out = ckpt.load_f32(prefix + "attention.to_out.0.weight", {dim, dim});
  if (config_.qk_norm) {
    b.norm_q = ckpt.load_f32(prefix + "attention.norm_q.weight", {hd});
    b.norm_k = ckpt.load_f32(prefix + "attention.norm_k.weight", {hd});
  }
  b.attention_norm1 = ckpt.load_f32(prefix + "attention_norm1.weight", {dim});
  b.attention_norm2 = ckpt.load_f32(prefix + "attention_norm2.weight", {dim});
  b.ffn_norm1 = ckpt.load_f32(prefix + "ffn_norm1.weight", {dim});
  b.ffn_norm2 = ckpt.load_f32(prefix + "ffn_norm2.weight", {dim});
  b.w13 = f32({2 * ffn, dim});
  ckpt.load_f32_into(prefix + "feed_forward.w1.weight", {ffn, dim}, b.w13.data<float>());
  ckpt.load_f32_into(prefix + "feed_forward.w3.weight", {ffn, dim}, b.w13.data<float>() + ffn * dim);
  b.w2 = ckpt.load_f32(prefix + "feed_forward.w2.weight", {dim, ffn});
  if (modulated) {
    b.modulation_w = ckpt.load_f32(prefix + "adaLN_modulation.0.weight", {4 * dim, config_.adaln_dim()});
    b.modulation_b = ckpt.load_f32(prefix + "adaLN_modulation.0.bias", {4 * dim});
  }
  return b;
}

Tensor Transformer::timestep_embedding(float t) const {
  // The sinusoidal features of t * t_scale ([cos, sin] of t * exp(-ln(10000) k / 128)), float32 as
  // diffusers computes them, then Linear -> SiLU -> Linear.
  const float scaled = t * config_.t_scale;
  constexpr int half = kFrequencyEmbedding / 2;
  Tensor freq = f32({1, kFrequencyEmbedding});
  const float neg_log = static_cast<float>(-std::log(10000.0));
  for (int k = 0; k < half; ++k) {
    const float f = std::exp(neg_log * static_cast<float>(k) / static_cast<float>(half));
    const float arg = scaled * f;
    freq.data<float>()[k] = std::cos(arg);
    freq.data<float>()[half + k] = std::sin(arg);
  }
  Tensor hidden = f32({1, kTimestepMlp});
  ops::linear(freq, t_mlp0_w_, t_mlp0_b_, hidden);
  ops::silu(hidden, hidden);
  Tensor out = f32({1, config_.adaln_dim()});
  ops::linear(hidden, t_mlp2_w_, t_mlp2_b_, out);
  return out;
}

Transformer::Rotation Transformer::rotation(const std::vector<std::array<int32_t, 3>>& positions) const {
  const int64_t n = static_cast<int64_t>(positions.size()), half = config_.head_dim() / 2;
  Rotation r{f32({n, half}), f32({n, half})};
  float* c = r.cos.data<float>();
  float* s = r.sin.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    int64_t slot = 0;
    for (int a = 0; a < 3; ++a) {
      const int32_t p = positions[i][a];
      if (p < 0 || p >= config_.axes_lens[a]) {
        throw_error(ErrorCode::kInvalidArgument,
                    "z_image transformer: position {} on RoPE axis {} is outside the model's axes_lens {} (image or "
                    "prompt too large)",
                    p, a, config_.axes_lens[a]);
      }
      for (double f : axis_freqs_[a]) {
        const float angle = static_cast<float>(static_cast<double>(p) * f);
        c[i * half + slot] = std::cos(angle);
        s[i * half + slot] = std::sin(angle);
        ++slot;
      }
    }
  }
  return r;
}

void Transformer::run_block(const Block& b, Tensor& x, const Rotation& rot, const Tensor& adaln) const {
  const int64_t tokens = x.dim(0), dim = config_.dim, heads = config_.n_heads, hd = config_.head_dim();
  const int64_t ffn = config_.ffn_dim();
  const bool modulated = b.modulation_w.defined();
  // scale_msa, gate_msa, scale_mlp, gate_mlp: scales become 1 + s, gates tanh(g).
  Tensor scale_msa, gate_msa, scale_mlp, gate_mlp;
  if (modulated) {
    Tensor mod = f32({1, 4 * dim});
    ops::linear(adaln, b.modulation_w, b.modulation_b, mod);
    float* m = mod.data<float>();
    for (int64_t i = 0; i < dim; ++i) {
      m[i] = 1.0f + m[i];
      m[dim + i] = std::tanh(m[dim + i]);
      m[2 * dim + i] = 1.0f + m[2 * dim + i];
      m[3 * dim + i] = std::tanh(m[3 * dim + i]);
    }
    const Tensor flat = mod.reshape({4 * dim});
    scale_msa = flat.slice_rows(0, dim);
    gate_msa = flat.slice_rows(dim, 2 * dim);
    scale_mlp = flat.slice_rows(2 * dim, 3 * dim);
    gate_mlp = flat.slice_rows(3 * dim, 4 * dim);
  } else {
    scale_msa = gate_msa = scale_mlp = gate_mlp = ones_;
  }
  const float eps = config_.norm_eps;
  Tensor normed = f32({tokens, dim});
  ops::rms_norm(x, b.attention_norm1, eps, normed);
  if (modulated) ops::mul_columns(normed, scale_msa, normed);
  Tensor qkv = f32({tokens, 3 * dim});
  ops::linear(normed, b.qkv, Tensor(), qkv);
  Tensor q = f32({tokens, heads, hd}), k = f32({tokens, heads, hd}), v = f32({tokens, heads, hd});
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = qkv.data<float>() + t * 3 * dim;
    std::memcpy(q.data<float>() + t * dim, row, sizeof(float) * dim);
    std::memcpy(k.data<float>() + t * dim, row + dim, sizeof(float) * dim);
    std::memcpy(v.data<float>() + t * dim, row + 2 * dim, sizeof(float) * dim);
  }
  if (b.norm_q.defined()) {
    constexpr float kQkNormEps = 1e-5f;  // diffusers' Attention(qk_norm="rms_norm", eps=1e-5)
    ops::rms_norm(q, b.norm_q, kQkNormEps, q);
    ops::rms_norm(k, b.norm_k, kQkNormEps, k);
  }
  ops::rotate_pairs(q, rot.cos, rot.sin);
  ops::rotate_pairs(k, rot.cos, rot.sin);
  Tensor attn = f32({tokens, heads, hd});
  ops::attention(q, k, v, 1.0f / std::sqrt(static_cast<float>(hd)), attn);
  Tensor proj = f32({tokens, dim});
  ops::linear(attn.reshape({tokens, dim}), b.out, Tensor(), proj);
  ops::rms_norm(proj, b.attention_norm2, eps, proj);
  ops::add_scaled(x, proj, gate_msa, x);

  ops::rms_norm(x, b.ffn_norm1, eps, normed);
  if (modulated) ops::mul_columns(normed, scale_mlp, normed);
  Tensor gate_up = f32({tokens, 2 * ffn});
  ops::linear(normed, b.w13, Tensor(), gate_up);
  Tensor act = f32({tokens, ffn});
  ops::silu_and_mul(gate_up, act);
  ops::linear(act, b.w2, Tensor(), proj);
  ops::rms_norm(proj, b.ffn_norm2, eps, proj);
  ops::add_scaled(x, proj, gate_mlp, x);
}

Tensor Transformer::forward(const Tensor& latents, float t, const Tensor& caption) const {
  const int64_t c = config_.in_channels, p = config_.patch_size, dim = config_.dim;
  if (latents.rank() != 3 || latents.dim(0) != c || latents.dim(1) % p != 0 || latents.dim(2) % p != 0 ||
      latents.dim(1) == 0 || latents.dim(2) == 0) {
    throw_error(ErrorCode::kInvalidArgument, "z_image transformer: latents must be [{}, H, W] with H, W multiples of {}, got {}",
                c, p, tensor::shape_to_string(latents.shape()));
  }
  if (caption.rank() != 2 || caption.dim(1) != config_.cap_feat_dim || caption.dim(0) == 0) {
    throw_error(ErrorCode::kInvalidArgument, "z_image transformer: caption features must be [L >= 1, {}], got {}",
                config_.cap_feat_dim, tensor::shape_to_string(caption.shape()));
  }
  const int64_t h_tokens = latents.dim(1) / p, w_tokens = latents.dim(2) / p;
  const int64_t image_len = h_tokens * w_tokens, image_padded = padded(image_len);
  const int64_t cap_len = caption.dim(0), cap_padded = padded(cap_len);
  const Tensor adaln = timestep_embedding(t);

  // Patches: token (h, w), feature (ph, pw, c).
  const int64_t features = config_.patch_features();
  Tensor patches = f32({image_len, features});
  const float* lat = latents.data<float>();
  const int64_t width = latents.dim(2), plane = latents.dim(1) * width;
  for (int64_t ht = 0; ht < h_tokens; ++ht)
    for (int64_t wt = 0; wt < w_tokens; ++wt)
      for (int64_t ph = 0; ph < p; ++ph)
        for (int64_t pw = 0; pw < p; ++pw)
          for (int64_t ch = 0; ch < c; ++ch)
            patches.data<float>()[(ht * w_tokens + wt) * features + (ph * p + pw) * c + ch] =
                lat[ch * plane + (ht * p + ph) * width + wt * p + pw];

  // The single stream [image tokens + pads, caption tokens + pads], embedded into one buffer.
  Tensor stream = f32({image_padded + cap_padded, dim});
  Tensor x = rows(stream, 0, image_padded);
  Tensor cap = rows(stream, image_padded, image_padded + cap_padded);
  {
    Tensor real = rows(x, 0, image_len);
    ops::linear(patches, x_embed_w_, x_embed_b_, real);
    for (int64_t i = image_len; i < image_padded; ++i) std::memcpy(x.data<float>() + i * dim, x_pad_.data<float>(), sizeof(float) * dim);
    Tensor normed = f32({cap_len, config_.cap_feat_dim});
    ops::rms_norm(caption, cap_norm_, config_.norm_eps, normed);
    Tensor cap_real = rows(cap, 0, cap_len);
    ops::linear(normed, cap_w_, cap_b_, cap_real);
    for (int64_t i = cap_len; i < cap_padded; ++i)
      std::memcpy(cap.data<float>() + i * dim, cap_pad_.data<float>(), sizeof(float) * dim);
  }
  // Positions: caption token i (pads included) at (1 + i, 0, 0); image token (h, w) at
  // (padded caption length + 1, h, w); image pads at (0, 0, 0).
  std::vector<std::array<int32_t, 3>> positions;
  positions.reserve(static_cast<size_t>(image_padded + cap_padded));
  for (int64_t ht = 0; ht < h_tokens; ++ht)
    for (int64_t wt = 0; wt < w_tokens; ++wt)
      positions.push_back({static_cast<int32_t>(cap_padded + 1), static_cast<int32_t>(ht), static_cast<int32_t>(wt)});
  for (int64_t i = image_len; i < image_padded; ++i) positions.push_back({0, 0, 0});
  for (int64_t i = 0; i < cap_padded; ++i) positions.push_back({static_cast<int32_t>(1 + i), 0, 0});
  const Rotation all = rotation(positions);
  const Rotation image_rot{rows(all.cos, 0, image_padded), rows(all.sin, 0, image_padded)};
  const Rotation cap_rot{rows(all.cos, image_padded, image_padded + cap_padded),
                         rows(all.sin, image_padded, image_padded + cap_padded)};

  for (const Block& b : noise_refiner_) run_block(b, x, image_rot, adaln);
  for (const Block& b : context_refiner_) run_block(b, cap, cap_rot, adaln);
  for (const Block& b : layers_) run_block(b, stream, all, adaln);

  // Final layer: LayerNorm (no affine) * (1 + Linear(SiLU(adaln))), Linear to the patch features.
  Tensor act = f32({1, config_.adaln_dim()});
  ops::silu(adaln, act);
  Tensor scale = f32({1, dim});
  ops::linear(act, final_mod_w_, final_mod_b_, scale);
  for (int64_t i = 0; i < dim; ++i) scale.data<float>()[i] += 1.0f;
  Tensor image_tokens = f32({image_len, dim});
  ops::layer_norm(rows(stream, 0, image_len), ones_, zeros_, 1e-6f, image_tokens);
  ops::mul_columns(image_tokens, scale.reshape({dim}), image_tokens);
  Tensor out_patches = f32({image_len, features});
  ops::linear(image_tokens, final_w_, final_b_, out_patches);

  Tensor out = f32(latents.shape());
  for (int64_t ht = 0; ht < h_tokens; ++ht)
    for (int64_t wt = 0; wt < w_tokens; ++wt)
      for (int64_t ph = 0; ph < p; ++ph)
        for (int64_t pw = 0; pw < p; ++pw)
          for (int64_t ch = 0; ch < c; ++ch)
            out.data<float>()[ch * plane + (ht * p + ph) * width + wt * p + pw] =
                out_patches.data<float>()[(ht * w_tokens + wt) * features + (ph * p + pw) * c + ch];
  return out;
}

}  // namespace omni::model::z_image
