#include "model/z_image/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "base/log.h"
#include "model/safetensors.h"
#include "tensor/dit_ops.h"
#include "tensor/ops.h"
#include "tensor/upload.h"

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

Transformer::Transformer(const std::filesystem::path& dir, const TransformerConfig& config, const Placement& placement)
    : config_(config), placement_(placement) {
  const Checkpoint ckpt = Checkpoint::open(dir / "transformer", "diffusion_pytorch_model");
  const int64_t dim = config.dim, adaln = config.adaln_dim();
  const std::string patch = std::to_string(config.patch_size) + "-1";
  t_mlp0_w_ = weight(ckpt, "t_embedder.mlp.0.weight", {kTimestepMlp, kFrequencyEmbedding});
  t_mlp0_b_ = weight(ckpt, "t_embedder.mlp.0.bias", {kTimestepMlp});
  t_mlp2_w_ = weight(ckpt, "t_embedder.mlp.2.weight", {adaln, kTimestepMlp});
  t_mlp2_b_ = weight(ckpt, "t_embedder.mlp.2.bias", {adaln});
  cap_norm_ = weight(ckpt, "cap_embedder.0.weight", {config.cap_feat_dim});
  cap_w_ = weight(ckpt, "cap_embedder.1.weight", {dim, config.cap_feat_dim});
  cap_b_ = weight(ckpt, "cap_embedder.1.bias", {dim});
  x_embed_w_ = weight(ckpt, "all_x_embedder." + patch + ".weight", {dim, config.patch_features()});
  x_embed_b_ = weight(ckpt, "all_x_embedder." + patch + ".bias", {dim});
  x_pad_ = weight(ckpt, "x_pad_token", {1, dim});
  cap_pad_ = weight(ckpt, "cap_pad_token", {1, dim});
  const std::string final_layer = "all_final_layer." + patch + ".";
  final_mod_w_ = weight(ckpt, final_layer + "adaLN_modulation.1.weight", {dim, adaln});
  final_mod_b_ = weight(ckpt, final_layer + "adaLN_modulation.1.bias", {dim});
  final_w_ = weight(ckpt, final_layer + "linear.weight", {config.patch_features(), dim});
  final_b_ = weight(ckpt, final_layer + "linear.bias", {config.patch_features()});
  Tensor ones = f32({dim});
  std::fill_n(ones.data<float>(), dim, 1.0f);
  ones_ = place(ones, placement_.dtype, placement_.device);
  zeros_ = Tensor::zeros({dim}, placement_.dtype, placement_.device);
  for (int i = 0; i < config.n_refiner_layers; ++i) {
    noise_refiner_.push_back(load_block(ckpt, "noise_refiner." + std::to_string(i) + ".", true));
    context_refiner_.push_back(load_block(ckpt, "context_refiner." + std::to_string(i) + ".", false));
  }
  for (int i = 0; i < config.n_layers; ++i)
    layers_.push_back(load_block(ckpt, "layers." + std::to_string(i) + ".", true));
  // Each axis's frequencies theta^(-2k/d), in float64 as diffusers precomputes them.
  for (int a = 0; a < 3; ++a) {
    const int d = config.axes_dims[a];
    for (int k = 0; k < d / 2; ++k) {
      axis_freqs_[a].push_back(1.0 / std::pow(static_cast<double>(config.rope_theta), 2.0 * k / d));
    }
  }
}

Tensor Transformer::activation(tensor::Shape shape) const {
  return Tensor::empty(std::move(shape), placement_.dtype, placement_.device);
}

Tensor Transformer::weight(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape) const {
  return ckpt.load(name, shape, placement_.dtype, placement_.device);
}

Transformer::Block Transformer::load_block(const Checkpoint& ckpt, const std::string& prefix, bool modulated) const {
  const int64_t dim = config_.dim, ffn = config_.ffn_dim(), hd = config_.head_dim();
  Block b;
  b.qkv = activation({3 * dim, dim});
  const char* qkv_names[] = {"attention.to_q.weight", "attention.to_k.weight", "attention.to_v.weight"};
  for (int i = 0; i < 3; ++i) {
    ckpt.load_slice_into(prefix + qkv_names[i], {dim, dim}, 0, 0, dim, b.qkv, static_cast<size_t>(i * dim * dim));
  }
  b.out = weight(ckpt, prefix + "attention.to_out.0.weight", {dim, dim});
  if (config_.qk_norm) {
    b.norm_q = weight(ckpt, prefix + "attention.norm_q.weight", {hd});
    b.norm_k = weight(ckpt, prefix + "attention.norm_k.weight", {hd});
  }
  b.attention_norm1 = weight(ckpt, prefix + "attention_norm1.weight", {dim});
  b.attention_norm2 = weight(ckpt, prefix + "attention_norm2.weight", {dim});
  b.ffn_norm1 = weight(ckpt, prefix + "ffn_norm1.weight", {dim});
  b.ffn_norm2 = weight(ckpt, prefix + "ffn_norm2.weight", {dim});
  b.w13 = activation({2 * ffn, dim});
  ckpt.load_slice_into(prefix + "feed_forward.w1.weight", {ffn, dim}, 0, 0, ffn, b.w13, 0);
  ckpt.load_slice_into(prefix + "feed_forward.w3.weight", {ffn, dim}, 0, 0, ffn, b.w13, static_cast<size_t>(ffn * dim));
  b.w2 = weight(ckpt, prefix + "feed_forward.w2.weight", {dim, ffn});
  if (modulated) {
    b.modulation_w = weight(ckpt, prefix + "adaLN_modulation.0.weight", {4 * dim, config_.adaln_dim()});
    b.modulation_b = weight(ckpt, prefix + "adaLN_modulation.0.bias", {4 * dim});
  }
  return b;
}

Tensor Transformer::timestep_frequencies(float t) const {
  // [cos, sin] of t * t_scale * exp(-ln(10000) k / 128), float32 as diffusers computes them.
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
  return freq;
}

Tensor Transformer::timestep_embedding(const Tensor& frequencies) const {
  Tensor hidden = activation({1, kTimestepMlp});
  ops::linear(frequencies, t_mlp0_w_, t_mlp0_b_, hidden);
  ops::silu(hidden, hidden);
  Tensor out = activation({1, config_.adaln_dim()});
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
  // float32 on every device: 16-bit angles would turn positions in the hundreds by whole degrees.
  return Rotation{place(r.cos, DType::kF32, placement_.device), place(r.sin, DType::kF32, placement_.device)};
}

Transformer::Rotation Transformer::cached_rotation(const std::array<int64_t, 3>& key,
                                                   const std::vector<std::array<int32_t, 3>>& positions) const {
  std::lock_guard lock(rotation_mutex_);
  auto it = rotations_.find(key);
  if (it != rotations_.end()) return it->second;
  if (rotations_.size() >= kCachedRotations) rotations_.clear();
  return rotations_.emplace(key, rotation(positions)).first->second;
}

void Transformer::run_block(const Block& b, Tensor& x, const Rotation& rot, const Tensor& adaln) const {
  const int64_t tokens = x.dim(0), dim = config_.dim, heads = config_.n_heads, hd = config_.head_dim();
  const int64_t ffn = config_.ffn_dim();
  const bool modulated = b.modulation_w.defined();
  // scale_msa, gate_msa, scale_mlp, gate_mlp: scales become 1 + s, gates tanh(g).
  Tensor scale_msa, gate_msa, scale_mlp, gate_mlp;
  if (modulated) {
    Tensor mod = activation({1, 4 * dim});
    ops::linear(adaln, b.modulation_w, b.modulation_b, mod);
    const Tensor flat = mod.reshape({4 * dim});
    scale_msa = flat.slice_rows(0, dim);
    gate_msa = flat.slice_rows(dim, 2 * dim);
    scale_mlp = flat.slice_rows(2 * dim, 3 * dim);
    gate_mlp = flat.slice_rows(3 * dim, 4 * dim);
    ops::add(scale_msa, ones_, scale_msa);
    ops::tanh(gate_msa, gate_msa);
    ops::add(scale_mlp, ones_, scale_mlp);
    ops::tanh(gate_mlp, gate_mlp);
  } else {
    scale_msa = gate_msa = scale_mlp = gate_mlp = ones_;
  }
  const float eps = config_.norm_eps;
  Tensor normed = activation({tokens, dim});
  if (modulated) {
    ops::modulated_rms_norm(x, b.attention_norm1, scale_msa, eps, normed);
  } else {
    ops::rms_norm(x, b.attention_norm1, eps, normed);
  }
  // One product for q, k and v (the weights stacked at load), then the q/k norms and the rotation
  // in one pass that also splits the heads out.
  Tensor qkv = activation({tokens, 3 * dim});
  ops::linear(normed, b.qkv, Tensor(), qkv);
  Tensor q = activation({tokens, heads, hd}), k = activation({tokens, heads, hd}), v = activation({tokens, heads, hd});
  constexpr float kQkNormEps = 1e-5f;  // diffusers' Attention(qk_norm="rms_norm", eps=1e-5)
  ops::qkv_norm_rotate(qkv, b.norm_q, b.norm_k, kQkNormEps, rot.cos, rot.sin, q, k, v);
  Tensor attn = activation({tokens, heads, hd});
  ops::attention(q, k, v, 1.0f / std::sqrt(static_cast<float>(hd)), attn);
  Tensor proj = activation({tokens, dim});
  ops::linear(attn.reshape({tokens, dim}), b.out, Tensor(), proj);
  ops::gated_rms_norm_add(x, proj, b.attention_norm2, gate_msa, eps);

  if (modulated) {
    ops::modulated_rms_norm(x, b.ffn_norm1, scale_mlp, eps, normed);
  } else {
    ops::rms_norm(x, b.ffn_norm1, eps, normed);
  }
  Tensor gate_up = activation({tokens, 2 * ffn});
  ops::linear(normed, b.w13, Tensor(), gate_up);
  Tensor act = activation({tokens, ffn});
  ops::silu_and_mul(gate_up, act);
  ops::linear(act, b.w2, Tensor(), proj);
  ops::gated_rms_norm_add(x, proj, b.ffn_norm2, gate_mlp, eps);
}

void Transformer::embed_caption(const Tensor& caption, const Tensor& pad_ids, Tensor& cap) const {
  const int64_t cap_len = caption.dim(0), cap_padded = cap.dim(0);
  Tensor normed = activation({cap_len, config_.cap_feat_dim});
  ops::rms_norm(caption, cap_norm_, config_.norm_eps, normed);
  Tensor cap_real = rows(cap, 0, cap_len);
  ops::linear(normed, cap_w_, cap_b_, cap_real);
  if (cap_padded > cap_len) {
    Tensor pads = rows(cap, cap_len, cap_padded);
    ops::embedding(cap_pad_, pad_ids.slice_rows(0, cap_padded - cap_len), pads);
  }
}

void Transformer::run_stream(const Tensor& frequencies, const Tensor& patches, const Tensor& pad_ids,
                             const Rotation& all, int64_t image_padded, Tensor& stream, Tensor& out) const {
  const int64_t dim = config_.dim, image_len = patches.dim(0), total = stream.dim(0);
  const Tensor adaln = timestep_embedding(frequencies);
  // The single stream [image tokens + pads, caption tokens + pads]; the pads are row 0 of their
  // one-row tables (ops::embedding of zeros).
  Tensor x = rows(stream, 0, image_padded);
  Tensor cap = rows(stream, image_padded, total);
  {
    Tensor real = rows(x, 0, image_len);
    ops::linear(patches, x_embed_w_, x_embed_b_, real);
    if (image_padded > image_len) {
      Tensor pads = rows(x, image_len, image_padded);
      ops::embedding(x_pad_, pad_ids.slice_rows(0, image_padded - image_len), pads);
    }
  }
  const Rotation image_rot{rows(all.cos, 0, image_padded), rows(all.sin, 0, image_padded)};
  const Rotation cap_rot{rows(all.cos, image_padded, total), rows(all.sin, image_padded, total)};

  for (const Block& b : noise_refiner_) run_block(b, x, image_rot, adaln);
  for (const Block& b : context_refiner_) run_block(b, cap, cap_rot, adaln);
  for (const Block& b : layers_) run_block(b, stream, all, adaln);

  // Final layer: LayerNorm (no affine) * (1 + Linear(SiLU(adaln))), Linear to the patch features.
  Tensor act = activation({1, config_.adaln_dim()});
  ops::silu(adaln, act);
  Tensor scale = activation({1, dim});
  ops::linear(act, final_mod_w_, final_mod_b_, scale);
  Tensor scale_flat = scale.reshape({dim});
  ops::add(scale_flat, ones_, scale_flat);
  Tensor image_tokens = activation({image_len, dim});
  ops::layer_norm(rows(stream, 0, image_len), ones_, zeros_, 1e-6f, image_tokens);
  ops::mul_columns(image_tokens, scale_flat, image_tokens);
  ops::linear(image_tokens, final_w_, final_b_, out);
}

void Transformer::set_cuda_graphs(bool on) {
  std::lock_guard lock(graph_mutex_);
  cuda_graphs_ = on;
  if (!on) graphs_.clear();
}

bool Transformer::uses_cuda_graphs() const {
  std::lock_guard lock(graph_mutex_);
  return cuda_graphs_ && placement_.device.type == tensor::DeviceType::kCuda;
}

Transformer::GraphCounts Transformer::graph_counts() const {
  std::lock_guard lock(graph_mutex_);
  GraphCounts counts = graph_counts_;
  counts.cached = graphs_.size();
  return counts;
}

Tensor Transformer::forward_graph(const std::array<int64_t, 3>& key, const Tensor& patches, const Tensor& frequencies,
                                  const Tensor& caption, const Rotation& all, int64_t image_padded,
                                  int64_t cap_padded) const {
  std::lock_guard lock(graph_mutex_);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    if (graphs_.size() >= kCachedGraphs) {
      auto oldest = graphs_.begin();
      for (auto g = graphs_.begin(); g != graphs_.end(); ++g) {
        if (g->second.last_use < oldest->second.last_use) oldest = g;
      }
      graphs_.erase(oldest);
    }
    // The recording's inputs and output are allocated here, outside the graph pool: they outlive
    // the recording and no other recording may use them as temporaries.
    const int64_t image_len = patches.dim(0);
    StepGraph g;
    g.patches = activation(patches.shape());
    g.frequencies = activation(frequencies.shape());
    g.stream = activation({image_padded + cap_padded, config_.dim});
    g.pad_ids = Tensor::zeros({std::max<int64_t>(1, image_padded - image_len)}, DType::kI32, placement_.device);
    g.out = activation(patches.shape());
    g.rotation = all;
    it = graphs_.emplace(key, std::move(g)).first;
  }
  StepGraph& g = it->second;
  g.last_use = ++graph_uses_;
  // The inputs, queued on the stream before the replay (the same conversions place() makes).
  tensor::copy_from_host({.memory = patches.raw()}, DType::kF32, static_cast<size_t>(patches.numel()), g.patches, 0);
  tensor::copy_from_host({.memory = frequencies.raw()}, DType::kF32, static_cast<size_t>(frequencies.numel()),
                         g.frequencies, 0);
  Tensor cap = rows(g.stream, image_padded, image_padded + cap_padded);
  embed_caption(place(caption, placement_.dtype, placement_.device),
                Tensor::zeros({std::max<int64_t>(1, cap_padded - caption.dim(0))}, DType::kI32), cap);
  if (g.graph.defined()) {
    g.graph.replay();
    ++graph_counts_.replays;
  } else {
    // The recording's warm-up runs the step on these inputs, so out holds this step's output.
    try {
      g.graph = tensor::DeviceGraph::capture(placement_.device, [&] {
        run_stream(g.frequencies, g.patches, g.pad_ids, g.rotation, image_padded, g.stream, g.out);
      });
    } catch (const Error& e) {
      graphs_.erase(it);
      // kInternal: a CUDA call of the recording failed (an op that cannot be recorded); other
      // errors are the step's own and would fail eagerly too.
      if (e.code() != ErrorCode::kInternal) throw;
      spdlog::warn(
          "z_image transformer: recording the step of {}x{} image tokens and {} caption tokens failed, "
          "running eagerly from now on: {}",
          key[0], key[1], key[2], e.what());
      graphs_.clear();
      cuda_graphs_ = false;
      return Tensor();
    }
    ++graph_counts_.captures;
    spdlog::debug("z_image transformer: recorded the step of {}x{} image tokens and {} caption tokens ({} kept)",
                  key[0], key[1], key[2], graphs_.size());
  }
  return host_f32(g.out);
}

Tensor Transformer::forward(const Tensor& latents, float t, const Tensor& caption) const {
  const int64_t c = config_.in_channels, p = config_.patch_size, dim = config_.dim;
  if (latents.rank() != 3 || latents.dim(0) != c || latents.dim(1) % p != 0 || latents.dim(2) % p != 0 ||
      latents.dim(1) == 0 || latents.dim(2) == 0) {
    throw_error(ErrorCode::kInvalidArgument,
                "z_image transformer: latents must be [{}, H, W] with H, W multiples of {}, got {}", c, p,
                tensor::shape_to_string(latents.shape()));
  }
  if (caption.rank() != 2 || caption.dim(1) != config_.cap_feat_dim || caption.dim(0) == 0) {
    throw_error(ErrorCode::kInvalidArgument, "z_image transformer: caption features must be [L >= 1, {}], got {}",
                config_.cap_feat_dim, tensor::shape_to_string(caption.shape()));
  }
  const int64_t h_tokens = latents.dim(1) / p, w_tokens = latents.dim(2) / p;
  const int64_t image_len = h_tokens * w_tokens, image_padded = padded(image_len);
  const int64_t cap_len = caption.dim(0), cap_padded = padded(cap_len);
  const Tensor frequencies = timestep_frequencies(t);

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

  // Positions: caption token i (pads included) at (1 + i, 0, 0); image token (h, w) at
  // (padded caption length + 1, h, w); image pads at (0, 0, 0).
  std::vector<std::array<int32_t, 3>> positions;
  positions.reserve(static_cast<size_t>(image_padded + cap_padded));
  for (int64_t ht = 0; ht < h_tokens; ++ht)
    for (int64_t wt = 0; wt < w_tokens; ++wt)
      positions.push_back({static_cast<int32_t>(cap_padded + 1), static_cast<int32_t>(ht), static_cast<int32_t>(wt)});
  for (int64_t i = image_len; i < image_padded; ++i) positions.push_back({0, 0, 0});
  for (int64_t i = 0; i < cap_padded; ++i) positions.push_back({static_cast<int32_t>(1 + i), 0, 0});
  const std::array<int64_t, 3> key{h_tokens, w_tokens, cap_padded};
  const Rotation all = cached_rotation(key, positions);

  Tensor out_patches;
  if (uses_cuda_graphs())
    out_patches = forward_graph(key, patches, frequencies, caption, all, image_padded, cap_padded);
  if (!out_patches.defined()) {
    // Eagerly: the inputs go up with the ops that read them; the pad ids are host zeros.
    const Tensor pad_ids =
        Tensor::zeros({std::max<int64_t>(1, std::max(image_padded - image_len, cap_padded - cap_len))}, DType::kI32);
    Tensor stream = activation({image_padded + cap_padded, dim});
    Tensor cap = rows(stream, image_padded, image_padded + cap_padded);
    embed_caption(place(caption, placement_.dtype, placement_.device), pad_ids, cap);
    Tensor device_patches = activation({image_len, features});
    run_stream(place(frequencies, placement_.dtype, placement_.device),
               place(patches, placement_.dtype, placement_.device), pad_ids, all, image_padded, stream, device_patches);
    out_patches = host_f32(device_patches);
  }

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
