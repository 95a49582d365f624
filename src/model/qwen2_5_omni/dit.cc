#include "model/qwen2_5_omni/dit.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"
#include "model/qwen2_5_omni/ode_solver.h"
#include "tensor/ops.h"

namespace omni::model::qwen2_5_omni {

using tensor::DType;
using tensor::Tensor;
namespace ops = tensor::ops;

namespace {

constexpr int kTimeFrequencies = 256;  // SinusPositionEmbedding's width
constexpr float kTimeScale = 1000.0f;
constexpr float kNormEps = 1e-6f;

qwen3_tts::SpeakerEncoderConfig ecapa_config(const DitConfig& c) {
  qwen3_tts::SpeakerEncoderConfig e;
  e.mel_dim = c.mel_dim;
  e.enc_dim = c.enc_dim;
  e.channels = c.enc_channels;
  e.kernel_sizes = c.enc_kernel_sizes;
  e.dilations = c.enc_dilations;
  e.attention_channels = c.enc_attention_channels;
  e.res2net_scale = c.enc_res2net_scale;
  e.se_channels = c.enc_se_channels;
  return e;
}

// Row r of a [R, C] tensor as a [C] view.
Tensor row(const Tensor& x, int64_t r) { return x.slice_rows(r, r + 1).reshape({x.dim(1)}); }

// `rows` copies of `values` [C], uploaded to `device`.
Tensor repeated_rows(std::span<const float> values, int64_t rows, tensor::Device device) {
  Tensor host = Tensor::empty({rows, static_cast<int64_t>(values.size())}, DType::kF32);
  for (int64_t r = 0; r < rows; ++r) std::copy(values.begin(), values.end(), host.data<float>() + r * values.size());
  return host.to(device);
}

}  // namespace

Dit::Linear Dit::load_linear(const Checkpoint& checkpoint, const std::string& name, int64_t out, int64_t in) const {
  const std::string p = kDitPrefix + name;
  return Linear{checkpoint.load_f32(p + ".weight", {out, in}).to(device_),
                checkpoint.load_f32(p + ".bias", {out}).to(device_)};
}

Dit::Dit(const Checkpoint& checkpoint, DitConfig config, tensor::Device device)
    : config_(std::move(config)), device_(device) {
  const DitConfig& c = config_;
  const int64_t h = c.hidden_size, inner = c.inner_dim();
  ecapa_ = std::make_unique<qwen3_tts::SpeakerEncoder>(checkpoint, ecapa_config(c), device,
                                                       std::string(kDitPrefix) + "input_embed.spk_encoder.");
  code_table_ =
      checkpoint.load_f32(std::string(kDitPrefix) + "text_embed.codec_embed.weight", {c.num_embeds + 1, c.emb_dim})
          .to(device_);
  time_in_ = load_linear(checkpoint, "time_embed.time_mlp.0", h, kTimeFrequencies);
  time_out_ = load_linear(checkpoint, "time_embed.time_mlp.2", h, h);
  input_proj_ =
      load_linear(checkpoint, "input_embed.proj", h, int64_t{c.mel_dim} + c.enc_dim + c.emb_dim + c.enc_emb_dim);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "transformer_blocks." + std::to_string(l) + ".";
    Block b;
    b.modulation = load_linear(checkpoint, p + "attn_norm.linear", 6 * h, h);
    b.q = load_linear(checkpoint, p + "attn.to_q", inner, h);
    b.k = load_linear(checkpoint, p + "attn.to_k", inner, h);
    b.v = load_linear(checkpoint, p + "attn.to_v", inner, h);
    b.out = load_linear(checkpoint, p + "attn.to_out.0", h, inner);
    // DiTMLP's ModuleList: Linear, GELU, Dropout, Linear.
    b.ff_in = load_linear(checkpoint, p + "ff.ff.0", c.ff_dim(), h);
    b.ff_out = load_linear(checkpoint, p + "ff.ff.3", h, c.ff_dim());
    b.ahead = c.look_ahead(l);
    b.backward = c.look_backward(l);
    blocks_.push_back(std::move(b));
  }
  norm_out_ = load_linear(checkpoint, "norm_out.linear", 2 * h, h);
  proj_out_ = load_linear(checkpoint, "proj_out", c.mel_dim, h);
  Tensor ones = Tensor::empty({h}, DType::kF32);
  std::fill_n(ones.data<float>(), h, 1.0f);
  ones_ = ones.to(device_);
}

Dit::~Dit() = default;

Tensor Dit::apply(const Linear& l, const Tensor& x) const {
  Tensor out = Tensor::empty({x.dim(0), l.weight.dim(0)}, DType::kF32, device_);
  ops::linear(x, l.weight, l.bias, out);
  return out;
}

DitConditioning Dit::condition(std::span<const int32_t> codes, std::span<const float> xvector,
                               std::span<const float> ref_mel, int64_t ref_frames) const {
  const DitConfig& c = config_;
  if (codes.empty()) throw_error(ErrorCode::kInvalidArgument, "token2wav DiT: no codes to synthesise");
  for (size_t i = 0; i < codes.size(); ++i) {
    if (codes[i] < 0 || codes[i] > c.num_embeds) {
      throw_error(ErrorCode::kInvalidArgument, "token2wav DiT: code {} at position {} is outside [0, {}]", codes[i], i,
                  c.num_embeds);
    }
  }
  if (xvector.size() != static_cast<size_t>(c.enc_emb_dim)) {
    throw_error(ErrorCode::kInvalidArgument, "token2wav DiT: the speaker x-vector has {} values, expected {}",
                xvector.size(), c.enc_emb_dim);
  }
  if (ref_frames <= 0 || ref_mel.size() != static_cast<size_t>(ref_frames * c.mel_dim)) {
    throw_error(ErrorCode::kInvalidArgument, "token2wav DiT: the reference mel has {} values, not {} frames of {}",
                ref_mel.size(), ref_frames, c.mel_dim);
  }
  const int64_t m = static_cast<int64_t>(codes.size()) * c.repeats;
  DitConditioning out;
  out.frames = m;
  // The ECAPA embedding of the reference mel (conditional) and of an all-zero mel (unconditional).
  const std::vector<float> cond_vec = ecapa_->embed_mel(ref_mel, ref_frames);
  const std::vector<float> zero_mel(ref_mel.size(), 0.0f);
  const std::vector<float> uncond_vec = ecapa_->embed_mel(zero_mel, ref_frames);
  const std::vector<float> zero_xvector(xvector.size(), 0.0f);

  // The code embedding, each code repeated `repeats` times; the unconditional branch reads code 0.
  Tensor ids = Tensor::empty({2 * m}, DType::kI32);
  for (int64_t r = 0; r < m; ++r) {
    ids.data<int32_t>()[r] = codes[r / c.repeats];
    ids.data<int32_t>()[m + r] = 0;
  }
  Tensor embedded = Tensor::empty({2 * m, c.emb_dim}, DType::kF32, device_);
  ops::embedding(code_table_, ids, embedded);

  const int64_t width = int64_t{c.enc_dim} + c.emb_dim + c.enc_emb_dim;
  out.inputs = Tensor::empty({2 * m, width}, DType::kF32, device_);
  for (int branch = 0; branch < 2; ++branch) {
    Tensor rows = out.inputs.slice_rows(branch * m, (branch + 1) * m);
    ops::copy_columns(repeated_rows(branch == 0 ? cond_vec : uncond_vec, m, device_), 0, rows, 0, c.enc_dim);
    ops::copy_columns(embedded.slice_rows(branch * m, (branch + 1) * m), 0, rows, c.enc_dim, c.emb_dim);
    ops::copy_columns(repeated_rows(branch == 0 ? xvector : std::span<const float>(zero_xvector), m, device_), 0, rows,
                      c.enc_dim + c.emb_dim, c.enc_emb_dim);
  }

  // Head 0's RoPE: pair i of position p turns by p * theta^(-2i/D), computed in float32 as
  // transformers computes its inverse frequencies and angles.
  const int64_t half = c.head_dim / 2;
  Tensor cos = Tensor::empty({2 * m, half}, DType::kF32), sin = Tensor::empty({2 * m, half}, DType::kF32);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    const float inv_freq = 1.0f / std::pow(c.rope_theta, exponent);
    for (int64_t p = 0; p < m; ++p) {
      const float angle = static_cast<float>(p) * inv_freq;
      for (int64_t branch = 0; branch < 2; ++branch) {
        cos.data<float>()[(branch * m + p) * half + i] = std::cos(angle);
        sin.data<float>()[(branch * m + p) * half + i] = std::sin(angle);
      }
    }
  }
  out.rope_cos = cos.to(device_);
  out.rope_sin = sin.to(device_);
  return out;
}

Tensor Dit::time_features(float t) const {
  // SinusPositionEmbedding: [sin | cos] of scale * t * exp(-i log(10000) / (half - 1)), float32.
  constexpr int kHalf = kTimeFrequencies / 2;
  const float step = static_cast<float>(std::log(10000.0) / (kHalf - 1));
  Tensor host = Tensor::empty({1, kTimeFrequencies}, DType::kF32);
  const float scaled = kTimeScale * t;
  for (int i = 0; i < kHalf; ++i) {
    const float freq = std::exp(static_cast<float>(i) * -step);
    const float arg = scaled * freq;
    host.data<float>()[i] = std::sin(arg);
    host.data<float>()[kHalf + i] = std::cos(arg);
  }
  Tensor hidden = apply(time_in_, host.to(device_));
  ops::silu(hidden, hidden);
  Tensor time = apply(time_out_, hidden);
  ops::silu(time, time);  // every modulation Linear reads silu(t)
  return time;
}

void Dit::attention(const Block& block, const Tensor& normed, const DitConditioning& cond, Tensor& out) const {
  const DitConfig& c = config_;
  const int64_t m = cond.frames, heads = c.num_attention_heads, d = c.head_dim;
  Tensor q = apply(block.q, normed), k = apply(block.k, normed);
  const Tensor v = apply(block.v, normed);
  // Only the first head is rotated (as the released weights were trained).
  Tensor head0 = Tensor::empty({2 * m, d}, DType::kF32, device_);
  for (Tensor* qk : {&q, &k}) {
    ops::copy_columns(*qk, 0, head0, 0, d);
    Tensor view = head0.reshape({2 * m, 1, d});
    ops::rotate_pairs(view, cond.rope_cos, cond.rope_sin);
    ops::copy_columns(head0, 0, *qk, 0, d);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t bs = c.block_size, blocks = (m + bs - 1) / bs;
  for (int64_t branch = 0; branch < 2; ++branch) {
    const int64_t base = branch * m;
    for (int64_t qb = 0; qb < blocks; ++qb) {
      // The keys a query block sees (dit_block_visible) are one contiguous range of blocks.
      const int64_t first = std::max<int64_t>(0, qb - block.backward);
      const int64_t last = std::min<int64_t>(blocks - 1, qb + block.ahead);
      const int64_t q0 = qb * bs, q1 = std::min(m, q0 + bs);
      const int64_t k0 = first * bs, k1 = std::min(m, (last + 1) * bs);
      const Tensor qv = q.slice_rows(base + q0, base + q1).reshape({q1 - q0, heads, d});
      const Tensor kv = k.slice_rows(base + k0, base + k1).reshape({k1 - k0, heads, d});
      const Tensor vv = v.slice_rows(base + k0, base + k1).reshape({k1 - k0, heads, d});
      Tensor ov = out.slice_rows(base + q0, base + q1).reshape({q1 - q0, heads, d});
      ops::attention(qv, kv, vv, scale, ov);
    }
  }
}

Tensor Dit::forward(const DitConditioning& cond, const Tensor& x, float t) const {
  const DitConfig& c = config_;
  const int64_t m = cond.frames, h = c.hidden_size, inner = c.inner_dim();
  if (x.rank() != 2 || x.dim(0) != m || x.dim(1) != c.mel_dim || x.dtype() != DType::kF32) {
    throw_error(ErrorCode::kInvalidArgument, "token2wav DiT: the noisy mel must be float32 [{}, {}]", m, c.mel_dim);
  }
  const Tensor xd = x.device() == device_ ? x : x.to(device_);
  // The input projection over [x | ECAPA | codes | x-vector], both branches.
  Tensor input = Tensor::empty({2 * m, input_proj_.weight.dim(1)}, DType::kF32, device_);
  for (int branch = 0; branch < 2; ++branch) {
    Tensor rows = input.slice_rows(branch * m, (branch + 1) * m);
    ops::copy_columns(xd, 0, rows, 0, c.mel_dim);
    ops::copy_columns(cond.inputs.slice_rows(branch * m, (branch + 1) * m), 0, rows, c.mel_dim, cond.inputs.dim(1));
  }
  Tensor hidden = apply(input_proj_, input);

  const Tensor time = time_features(t);
  Tensor normed = Tensor::empty({2 * m, h}, DType::kF32, device_);
  Tensor attn = Tensor::empty({2 * m, inner}, DType::kF32, device_);
  Tensor scale_msa = Tensor::empty({h}, DType::kF32, device_), scale_mlp = Tensor::empty({h}, DType::kF32, device_);
  for (const Block& block : blocks_) {
    // AdaLayerNormZero: shift, scale, gate of the attention, then of the MLP.
    const Tensor mod = apply(block.modulation, time).reshape({6, h});
    ops::add(row(mod, 1), ones_, scale_msa);
    ops::add(row(mod, 4), ones_, scale_mlp);
    // LayerNorm without affine, then * (1 + scale) + shift: one LayerNorm with that weight and bias.
    ops::layer_norm(hidden, scale_msa, row(mod, 0), kNormEps, normed);

    attention(block, normed, cond, attn);
    const Tensor attn_out = apply(block.out, attn);
    ops::add_scaled(hidden, attn_out, row(mod, 2), hidden);

    ops::layer_norm(hidden, scale_mlp, row(mod, 3), kNormEps, normed);
    Tensor ff = apply(block.ff_in, normed);
    ops::gelu(ff, ops::GeluApproximation::kTanh, ff);
    const Tensor ff_out = apply(block.ff_out, ff);
    ops::add_scaled(hidden, ff_out, row(mod, 5), hidden);
  }
  // AdaLayerNormZero_Final: (scale, shift) in that order.
  const Tensor final_mod = apply(norm_out_, time).reshape({2, h});
  ops::add(row(final_mod, 0), ones_, scale_msa);
  ops::layer_norm(hidden, scale_msa, row(final_mod, 1), kNormEps, normed);
  return apply(proj_out_, normed);
}

Tensor Dit::velocity(const DitConditioning& c, const Tensor& x, float t, float guidance_scale) const {
  const Tensor both = forward(c, x, t);
  const int64_t m = c.frames, mel = config_.mel_dim;
  const Tensor cond = both.slice_rows(0, m), uncond = both.slice_rows(m, 2 * m);
  Tensor minus_one = Tensor::empty({mel}, DType::kF32), guidance = Tensor::empty({mel}, DType::kF32);
  std::fill_n(minus_one.data<float>(), mel, -1.0f);
  std::fill_n(guidance.data<float>(), mel, guidance_scale);
  Tensor diff = Tensor::empty({m, mel}, DType::kF32, device_), out = Tensor::empty({m, mel}, DType::kF32, device_);
  ops::add_scaled(cond, uncond, minus_one.to(device_), diff);
  ops::add_scaled(cond, diff, guidance.to(device_), out);
  return out;
}

Tensor Dit::sample(const DitConditioning& c, const Tensor& noise, const DitSampling& sampling) const {
  if (noise.rank() != 2 || noise.dim(0) != c.frames || noise.dim(1) != config_.mel_dim ||
      noise.dtype() != DType::kF32) {
    throw_error(ErrorCode::kInvalidArgument, "token2wav DiT: the initial noise must be float32 [{}, {}]", c.frames,
                config_.mel_dim);
  }
  const std::vector<float> times = sway_time_points(sampling.num_steps, sampling.sway_coefficient);
  const OdeFunction f = [&](float t, const Tensor& x) { return velocity(c, x, t, sampling.guidance_scale); };
  return integrate_rk4_38(f, noise.device() == device_ ? noise : noise.to(device_), times);
}

}  // namespace omni::model::qwen2_5_omni
