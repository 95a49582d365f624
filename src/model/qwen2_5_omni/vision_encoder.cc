#include "model/qwen2_5_omni/vision_encoder.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "model/hf_config.h"
#include "model/safetensors.h"
#include "tensor/ops.h"

namespace omni::model::qwen2_5_omni {
namespace {

using tensor::DType;
using tensor::Tensor;
namespace ops = tensor::ops;

constexpr float kRmsNormEps = 1e-6f;
constexpr float kRopeTheta = 10000.0f;

int positive_field(const Json& c, const char* key, int fallback, const std::string& source) {
  return bounded_int(c, key, fallback, 1, 1 << 20, source);
}

// The rows of a q or k projection (`width` values per row: 1 for a bias) with each head's halves
// interleaved: new row 2j <- j, 2j + 1 <- j + head_dim / 2 of every head.
Tensor interleave_halves(const Tensor& w, int64_t head_dim, int64_t width) {
  Tensor out = Tensor::empty(w.shape(), DType::kF32);
  const float* src = w.data<float>();
  float* dst = out.data<float>();
  const int64_t half = head_dim / 2, heads = w.dim(0) / head_dim;
  for (int64_t head = 0; head < heads; ++head) {
    const int64_t base = head * head_dim;
    for (int64_t j = 0; j < half; ++j) {
      std::copy(src + (base + j) * width, src + (base + j + 1) * width, dst + (base + 2 * j) * width);
      std::copy(src + (base + half + j) * width, src + (base + half + j + 1) * width, dst + (base + 2 * j + 1) * width);
    }
  }
  return out;
}

// Rows a then b stacked: [a rows + b rows, ...].
Tensor stack_rows(const Tensor& a, const Tensor& b) {
  tensor::Shape shape = a.shape();
  shape[0] += b.dim(0);
  Tensor out = Tensor::empty(shape, DType::kF32);
  float* dst = std::copy(a.data<float>(), a.data<float>() + a.numel(), out.data<float>());
  std::copy(b.data<float>(), b.data<float>() + b.numel(), dst);
  return out;
}

}  // namespace

VisionEncoderConfig parse_vision_encoder_config(const Json& c, const std::string& source) {
  if (!c.is_object()) throw_error(ErrorCode::kLoadFailed, "{}: must be a JSON object", source);
  VisionEncoderConfig v;
  v.depth = positive_field(c, "depth", v.depth, source);
  v.hidden_size = positive_field(c, "hidden_size", v.hidden_size, source);
  v.num_heads = positive_field(c, "num_heads", v.num_heads, source);
  v.intermediate_size = positive_field(c, "intermediate_size", v.intermediate_size, source);
  v.out_hidden_size = positive_field(c, "out_hidden_size", v.out_hidden_size, source);
  v.patch_size = positive_field(c, "patch_size", v.patch_size, source);
  v.temporal_patch_size = positive_field(c, "temporal_patch_size", v.temporal_patch_size, source);
  v.spatial_merge_size = positive_field(c, "spatial_merge_size", v.spatial_merge_size, source);
  // Older configs spell it in_chans.
  v.in_channels = positive_field(c, "in_chans", v.in_channels, source);
  v.in_channels = positive_field(c, "in_channels", v.in_channels, source);
  v.window_size = positive_field(c, "window_size", v.window_size, source);
  if (auto it = c.find("fullatt_block_indexes"); it != c.end() && !it->is_null()) {
    if (!it->is_array()) {
      throw_error(ErrorCode::kLoadFailed, "{}: 'fullatt_block_indexes' must be a list, got {}", source, it->dump());
    }
    v.fullatt_block_indexes.clear();
    for (const Json& i : *it) {
      if (!i.is_number_integer() || i.get<int>() < 0 || i.get<int>() >= v.depth) {
        throw_error(ErrorCode::kLoadFailed, "{}: 'fullatt_block_indexes' entry {} is not a block index below depth {}",
                    source, i.dump(), v.depth);
      }
      v.fullatt_block_indexes.push_back(i.get<int>());
    }
  }
  const int hd = v.hidden_size / v.num_heads;
  if (v.hidden_size % v.num_heads != 0 || hd % 4 != 0) {
    throw_error(ErrorCode::kLoadFailed, "{}: hidden_size {} over num_heads {} must give a head size divisible by 4",
                source, v.hidden_size, v.num_heads);
  }
  if (v.window_blocks() < 1) {
    throw_error(ErrorCode::kLoadFailed, "{}: window_size {} is smaller than one merge block ({} x {} patches of {} px)",
                source, v.window_size, v.spatial_merge_size, v.spatial_merge_size, v.patch_size);
  }
  if (auto it = c.find("hidden_act"); it != c.end() && it->is_string() && it->get<std::string>() != "silu") {
    throw_error(ErrorCode::kUnsupported, "{}: hidden_act '{}' is not supported (silu)", source, it->get<std::string>());
  }
  return v;
}

VisionEncoderConfig thinker_vision_config(const Json& config, const std::string& source) {
  auto thinker = config.find("thinker_config");
  if (thinker == config.end() || !thinker->is_object() || !thinker->contains("vision_config")) {
    throw_error(ErrorCode::kLoadFailed, "{}: missing field 'thinker_config.vision_config'", source);
  }
  return parse_vision_encoder_config((*thinker)["vision_config"], source + ": thinker_config.vision_config");
}

WindowLayout window_layout(std::span<const VisionGrid> grids, int spatial_merge_size, int window_blocks) {
  WindowLayout out;
  const int64_t m = spatial_merge_size, ws = window_blocks;
  int64_t first = 0;  // the medium's first block
  for (size_t i = 0; i < grids.size(); ++i) {
    const VisionGrid& g = grids[i];
    if (g[0] <= 0 || g[1] <= 0 || g[2] <= 0 || g[1] % m != 0 || g[2] % m != 0) {
      throw_error(ErrorCode::kInvalidArgument, "medium {}: the grid {} x {} x {} does not fit the {} x {} merge", i,
                  g[0], g[1], g[2], m, m);
    }
    const int64_t bh = g[1] / m, bw = g[2] / m;
    for (int64_t t = 0; t < g[0]; ++t) {
      for (int64_t wr = 0; wr * ws < bh; ++wr) {
        for (int64_t wc = 0; wc * ws < bw; ++wc) {
          int64_t blocks = 0;
          for (int64_t r = wr * ws; r < std::min(bh, (wr + 1) * ws); ++r) {
            for (int64_t c = wc * ws; c < std::min(bw, (wc + 1) * ws); ++c, ++blocks) {
              out.order.push_back(first + (t * bh + r) * bw + c);
            }
          }
          out.window_patches.push_back(blocks * m * m);
        }
      }
    }
    first += g[0] * bh * bw;
  }
  return out;
}

Tensor VisionEncoder::weight(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape) const {
  return ckpt.load(name, shape, placement_.dtype, placement_.device);
}

VisionEncoder::VisionEncoder(const Checkpoint& ckpt, const VisionEncoderConfig& config, const std::string& prefix,
                             Placement placement)
    : config_(config), placement_(placement) {
  const int64_t h = config_.hidden_size, inter = config_.intermediate_size, hd = h / config_.num_heads;
  const auto [device, dtype] = placement_;
  patch_w_ = weight(ckpt, prefix + "patch_embed.proj.weight",
                    {h, config_.in_channels, config_.temporal_patch_size, config_.patch_size, config_.patch_size})
                 .reshape({h, config_.patch_values()});
  for (int b = 0; b < config_.depth; ++b) {
    const std::string p = prefix + "blocks." + std::to_string(b) + ".";
    Block block;
    block.norm1_w = weight(ckpt, p + "norm1.weight", {h});
    block.q_w = place(interleave_halves(ckpt.load_f32(p + "attn.q.weight", {h, h}), hd, h), dtype, device);
    block.q_b = place(interleave_halves(ckpt.load_f32(p + "attn.q.bias", {h}), hd, 1), dtype, device);
    block.k_w = place(interleave_halves(ckpt.load_f32(p + "attn.k.weight", {h, h}), hd, h), dtype, device);
    block.k_b = place(interleave_halves(ckpt.load_f32(p + "attn.k.bias", {h}), hd, 1), dtype, device);
    block.v_w = weight(ckpt, p + "attn.v.weight", {h, h});
    block.v_b = weight(ckpt, p + "attn.v.bias", {h});
    block.proj_w = weight(ckpt, p + "attn.proj.weight", {h, h});
    block.proj_b = weight(ckpt, p + "attn.proj.bias", {h});
    block.norm2_w = weight(ckpt, p + "norm2.weight", {h});
    // gate then up (loaded in that order, so that an error names the first one at fault).
    const Tensor gate_w = ckpt.load_f32(p + "mlp.gate_proj.weight", {inter, h});
    const Tensor gate_b = ckpt.load_f32(p + "mlp.gate_proj.bias", {inter});
    const Tensor up_w = ckpt.load_f32(p + "mlp.up_proj.weight", {inter, h});
    const Tensor up_b = ckpt.load_f32(p + "mlp.up_proj.bias", {inter});
    block.gate_up_w = place(stack_rows(gate_w, up_w), dtype, device);
    block.gate_up_b = place(stack_rows(gate_b, up_b), dtype, device);
    block.down_w = weight(ckpt, p + "mlp.down_proj.weight", {h, inter});
    block.down_b = weight(ckpt, p + "mlp.down_proj.bias", {h});
    blocks_.push_back(std::move(block));
  }
  const int64_t merged = h * config_.spatial_merge_size * config_.spatial_merge_size;
  ln_q_w_ = weight(ckpt, prefix + "merger.ln_q.weight", {h});
  fc1_w_ = weight(ckpt, prefix + "merger.mlp.0.weight", {merged, merged});
  fc1_b_ = weight(ckpt, prefix + "merger.mlp.0.bias", {merged});
  fc2_w_ = weight(ckpt, prefix + "merger.mlp.2.weight", {config_.out_hidden_size, merged});
  fc2_b_ = weight(ckpt, prefix + "merger.mlp.2.bias", {config_.out_hidden_size});
}

Tensor VisionEncoder::encode(const Tensor& patches, std::span<const VisionGrid> grids) const {
  const int64_t hidden = config_.hidden_size, heads = config_.num_heads, hd = hidden / heads;
  const int64_t m = config_.spatial_merge_size, unit = m * m, values = config_.patch_values();
  const WindowLayout layout = window_layout(grids, config_.spatial_merge_size, config_.window_blocks());
  const int64_t blocks = static_cast<int64_t>(layout.order.size()), total = blocks * unit;
  if (patches.rank() != 2 || patches.dim(0) != total || patches.dim(1) != values) {
    throw_error(ErrorCode::kInvalidArgument, "the patches {} do not fit the grids ({} patches of {} values)",
                tensor::shape_to_string(patches.shape()), total, values);
  }

  // 1: the patches in window order, and the rotary angles of each: the first hd/4 frequencies by
  // its row, the next hd/4 by its column.
  std::vector<int64_t> block_row(static_cast<size_t>(blocks)), block_col(static_cast<size_t>(blocks));
  {
    int64_t first = 0;
    for (const VisionGrid& g : grids) {
      const int64_t bh = g[1] / m, bw = g[2] / m;
      for (int64_t b = 0; b < g[0] * bh * bw; ++b) {
        block_row[first + b] = (b / bw) % bh;
        block_col[first + b] = b % bw;
      }
      first += g[0] * bh * bw;
    }
  }
  const int64_t quarter = hd / 4, half = hd / 2;
  std::vector<float> inv_freq(static_cast<size_t>(quarter));
  for (int64_t j = 0; j < quarter; ++j) {
    inv_freq[j] = 1.0f / std::pow(kRopeTheta, static_cast<float>(2 * j) / static_cast<float>(half));
  }
  Tensor ordered = Tensor::empty({total, values}, DType::kF32);
  Tensor cos_host = Tensor::empty({total, half}, DType::kF32), sin_host = Tensor::empty({total, half}, DType::kF32);
  {
    const float* src = patches.data<float>();
    float *dst = ordered.data<float>(), *cos = cos_host.data<float>(), *sin = sin_host.data<float>();
    for (int64_t k = 0; k < blocks; ++k) {
      const int64_t b = layout.order[k];
      std::copy(src + b * unit * values, src + (b + 1) * unit * values, dst + k * unit * values);
      for (int64_t i = 0; i < unit; ++i) {
        const int64_t p = k * unit + i;
        const float row = static_cast<float>(block_row[b] * m + i / m);
        const float col = static_cast<float>(block_col[b] * m + i % m);
        for (int64_t j = 0; j < quarter; ++j) {
          const float a = row * inv_freq[j], c = col * inv_freq[j];
          cos[p * half + j] = std::cos(a);
          sin[p * half + j] = std::sin(a);
          cos[p * half + quarter + j] = std::cos(c);
          sin[p * half + quarter + j] = std::sin(c);
        }
      }
    }
  }
  // The full-attention segments: each temporal slice of each medium (contiguous in window order).
  std::vector<int64_t> slices;
  for (const VisionGrid& g : grids)
    for (int64_t t = 0; t < g[0]; ++t) slices.push_back(g[1] * g[2]);

  // 2: patch embedding.
  const auto [device, dtype] = placement_;
  const Tensor cos = place(cos_host, DType::kF32, device), sin = place(sin_host, DType::kF32, device);
  Tensor h = Tensor::empty({total, hidden}, dtype, device);
  ops::linear(place(ordered, dtype, device), patch_w_, Tensor(), h);

  // 3: the blocks.
  Tensor x = Tensor::empty({total, hidden}, dtype, device);
  Tensor q = Tensor::empty({total, heads, hd}, dtype, device), k = Tensor::empty({total, heads, hd}, dtype, device);
  Tensor v = Tensor::empty({total, heads, hd}, dtype, device), attn = Tensor::empty({total, heads, hd}, dtype, device);
  Tensor branch = Tensor::empty({total, hidden}, dtype, device);
  Tensor gate_up = Tensor::empty({total, 2 * config_.intermediate_size}, dtype, device);
  Tensor act = Tensor::empty({total, config_.intermediate_size}, dtype, device);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (size_t b = 0; b < blocks_.size(); ++b) {
    const Block& l = blocks_[b];
    const bool full = std::find(config_.fullatt_block_indexes.begin(), config_.fullatt_block_indexes.end(),
                                static_cast<int>(b)) != config_.fullatt_block_indexes.end();
    ops::rms_norm(h, l.norm1_w, kRmsNormEps, x);
    Tensor q_rows = q.reshape({total, hidden}), k_rows = k.reshape({total, hidden}),
           v_rows = v.reshape({total, hidden});
    ops::linear(x, l.q_w, l.q_b, q_rows);
    ops::linear(x, l.k_w, l.k_b, k_rows);
    ops::linear(x, l.v_w, l.v_b, v_rows);
    ops::rotate_pairs(q, cos, sin);
    ops::rotate_pairs(k, cos, sin);
    int64_t start = 0;
    for (int64_t len : full ? slices : layout.window_patches) {
      Tensor os = attn.slice_rows(start, start + len);
      ops::attention(q.slice_rows(start, start + len), k.slice_rows(start, start + len),
                     v.slice_rows(start, start + len), scale, os);
      start += len;
    }
    ops::linear(attn.reshape({total, hidden}), l.proj_w, l.proj_b, branch);
    ops::add(h, branch, h);
    ops::rms_norm(h, l.norm2_w, kRmsNormEps, x);
    ops::linear(x, l.gate_up_w, l.gate_up_b, gate_up);
    ops::silu_and_mul(gate_up, act);
    ops::linear(act, l.down_w, l.down_b, branch);
    ops::add(h, branch, h);
  }

  // 4: the merger.
  ops::rms_norm(h, ln_q_w_, kRmsNormEps, x);
  const int64_t merged = hidden * unit;
  Tensor up = Tensor::empty({blocks, merged}, dtype, device);
  ops::linear(x.reshape({blocks, merged}), fc1_w_, fc1_b_, up);
  ops::gelu(up, ops::GeluApproximation::kNone, up);
  Tensor rows = Tensor::empty({blocks, config_.out_hidden_size}, dtype, device);
  ops::linear(up, fc2_w_, fc2_b_, rows);
  const Tensor windowed = host_f32(rows);

  // 5: back to the processor's order.
  const int64_t width = config_.out_hidden_size;
  Tensor out = Tensor::empty({blocks, width}, DType::kF32);
  for (int64_t kk = 0; kk < blocks; ++kk) {
    std::copy(windowed.data<float>() + kk * width, windowed.data<float>() + (kk + 1) * width,
              out.data<float>() + layout.order[kk] * width);
  }
  return out;
}

}  // namespace omni::model::qwen2_5_omni
