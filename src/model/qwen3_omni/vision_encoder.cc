#include "model/qwen3_omni/vision_encoder.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "model/hf_config.h"
#include "model/safetensors.h"
#include "tensor/ops.h"

namespace omni::model::qwen3_omni {
namespace {

using tensor::DType;
using tensor::Tensor;
namespace ops = tensor::ops;

constexpr float kLayerNormEps = 1e-6f;

// A size field of the tower's config: 1 to 2^20.
int positive_field(const Json& c, const char* key, int fallback, const std::string& source) {
  return bounded_int(c, key, fallback, 1, 1 << 20, source);
}

// The q and k parts of a fused qkv projection's rows (`width` values per row: 1 for a bias) with
// each head's halves interleaved: new row 2j <- j, 2j + 1 <- j + head_dim / 2 of every head.
Tensor interleave_qk_halves(const Tensor& w, int64_t hidden, int64_t head_dim, int64_t width) {
  Tensor out = Tensor::empty(w.shape(), DType::kF32);
  const float* src = w.data<float>();
  float* dst = out.data<float>();
  std::copy(src, src + w.numel(), dst);
  const int64_t half = head_dim / 2;
  for (int64_t head = 0; head < 2 * hidden / head_dim; ++head) {  // the heads of q, then of k
    for (int64_t j = 0; j < half; ++j) {
      const int64_t base = head * head_dim;
      std::copy(src + (base + j) * width, src + (base + j + 1) * width, dst + (base + 2 * j) * width);
      std::copy(src + (base + half + j) * width, src + (base + half + j + 1) * width,
                dst + (base + 2 * j + 1) * width);
    }
  }
  return out;
}

// torch.linspace(0, n - 1, steps) in float32, as ATen computes it (from both ends towards the middle).
std::vector<float> linspace(int64_t n, int64_t steps) {
  std::vector<float> out(static_cast<size_t>(steps));
  if (steps == 1) {
    out[0] = 0.0f;
    return out;
  }
  const float end = static_cast<float>(n - 1);
  const float step = end / static_cast<float>(steps - 1);
  const int64_t halfway = steps / 2;
  for (int64_t i = 0; i < steps; ++i) {
    out[i] = i < halfway ? step * static_cast<float>(i) : end - step * static_cast<float>(steps - i - 1);
  }
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
  v.in_channels = positive_field(c, "in_channels", v.in_channels, source);
  v.num_position_embeddings = positive_field(c, "num_position_embeddings", v.num_position_embeddings, source);
  if (auto it = c.find("deepstack_visual_indexes"); it != c.end() && !it->is_null()) {
    if (!it->is_array()) {
      throw_error(ErrorCode::kLoadFailed, "{}: 'deepstack_visual_indexes' must be a list, got {}", source, it->dump());
    }
    v.deepstack_visual_indexes.clear();
    for (const Json& i : *it) {
      if (!i.is_number_integer() || i.get<int>() < 0 || i.get<int>() >= v.depth) {
        throw_error(ErrorCode::kLoadFailed,
                    "{}: 'deepstack_visual_indexes' entry {} is not a block index below depth {}", source, i.dump(),
                    v.depth);
      }
      v.deepstack_visual_indexes.push_back(i.get<int>());
    }
  }
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = c.find(key);
    if (it == c.end() || !it->is_object()) continue;
    if (auto t = it->find("rope_theta"); t != it->end() && t->is_number()) v.rope_theta = t->get<float>();
    break;
  }
  if (auto t = c.find("rope_theta"); t != c.end() && t->is_number()) v.rope_theta = t->get<float>();
  const int hd = v.hidden_size / v.num_heads;
  if (v.hidden_size % v.num_heads != 0 || hd % 4 != 0) {
    throw_error(ErrorCode::kLoadFailed, "{}: hidden_size {} over num_heads {} must give a head size divisible by 4",
                source, v.hidden_size, v.num_heads);
  }
  const int side = static_cast<int>(std::lround(std::sqrt(static_cast<double>(v.num_position_embeddings))));
  if (side * side != v.num_position_embeddings) {
    throw_error(ErrorCode::kLoadFailed, "{}: num_position_embeddings {} is not a square", source,
                v.num_position_embeddings);
  }
  if (auto it = c.find("hidden_act");
      it != c.end() && it->is_string() && it->get<std::string>() != "gelu_pytorch_tanh") {
    throw_error(ErrorCode::kUnsupported, "{}: hidden_act '{}' is not supported (gelu_pytorch_tanh)", source,
                it->get<std::string>());
  }
  return v;
}

Tensor VisionEncoder::weight(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape) const {
  return ckpt.load(name, shape, placement_.dtype, placement_.device);
}

VisionEncoder::Merger VisionEncoder::load_merger(const Checkpoint& ckpt, const std::string& name,
                                                 bool norm_after_merge) const {
  const int64_t h = config_.hidden_size, merged = h * config_.spatial_merge_size * config_.spatial_merge_size;
  Merger m;
  m.norm_w = weight(ckpt, name + "ln_q.weight", {norm_after_merge ? merged : h});
  m.norm_b = weight(ckpt, name + "ln_q.bias", {norm_after_merge ? merged : h});
  m.fc1_w = weight(ckpt, name + "mlp.0.weight", {merged, merged});
  m.fc1_b = weight(ckpt, name + "mlp.0.bias", {merged});
  m.fc2_w = weight(ckpt, name + "mlp.2.weight", {config_.out_hidden_size, merged});
  m.fc2_b = weight(ckpt, name + "mlp.2.bias", {config_.out_hidden_size});
  return m;
}

VisionEncoder::VisionEncoder(const Checkpoint& ckpt, const VisionEncoderConfig& config, const std::string& prefix,
                             Placement placement)
    : config_(config), placement_(placement) {
  const int64_t h = config_.hidden_size, inter = config_.intermediate_size, hd = h / config_.num_heads;
  patch_w_ = weight(ckpt, prefix + "patch_embed.proj.weight",
                    {h, config_.in_channels, config_.temporal_patch_size, config_.patch_size, config_.patch_size})
                 .reshape({h, config_.patch_values()});
  patch_b_ = weight(ckpt, prefix + "patch_embed.proj.bias", {h});
  pos_embed_ = ckpt.load_f32(prefix + "pos_embed.weight", {config_.num_position_embeddings, h});
  for (int b = 0; b < config_.depth; ++b) {
    const std::string p = prefix + "blocks." + std::to_string(b) + ".";
    Block block;
    block.norm1_w = weight(ckpt, p + "norm1.weight", {h});
    block.norm1_b = weight(ckpt, p + "norm1.bias", {h});
    block.qkv_w = place(interleave_qk_halves(ckpt.load_f32(p + "attn.qkv.weight", {3 * h, h}), h, hd, h),
                        placement_.dtype, placement_.device);
    block.qkv_b = place(interleave_qk_halves(ckpt.load_f32(p + "attn.qkv.bias", {3 * h}), h, hd, 1), placement_.dtype,
                        placement_.device);
    block.proj_w = weight(ckpt, p + "attn.proj.weight", {h, h});
    block.proj_b = weight(ckpt, p + "attn.proj.bias", {h});
    block.norm2_w = weight(ckpt, p + "norm2.weight", {h});
    block.norm2_b = weight(ckpt, p + "norm2.bias", {h});
    block.fc1_w = weight(ckpt, p + "mlp.linear_fc1.weight", {inter, h});
    block.fc1_b = weight(ckpt, p + "mlp.linear_fc1.bias", {inter});
    block.fc2_w = weight(ckpt, p + "mlp.linear_fc2.weight", {h, inter});
    block.fc2_b = weight(ckpt, p + "mlp.linear_fc2.bias", {h});
    blocks_.push_back(std::move(block));
  }
  merger_ = load_merger(ckpt, prefix + "merger.", /*norm_after_merge=*/false);
  for (size_t k = 0; k < config_.deepstack_visual_indexes.size(); ++k) {
    deepstack_mergers_.push_back(load_merger(ckpt, prefix + "merger_list." + std::to_string(k) + ".", true));
  }
}

Tensor VisionEncoder::merge(const Merger& m, const Tensor& h, bool norm_after_merge) const {
  const auto [device, dtype] = placement_;
  const int64_t unit = static_cast<int64_t>(config_.spatial_merge_size) * config_.spatial_merge_size;
  const int64_t merged = config_.hidden_size * unit, blocks = h.dim(0) / unit;
  Tensor x = Tensor::empty(h.shape(), dtype, device);
  if (norm_after_merge) {
    Tensor rows = x.reshape({blocks, merged});
    ops::layer_norm(h.reshape({blocks, merged}), m.norm_w, m.norm_b, kLayerNormEps, rows);
  } else {
    ops::layer_norm(h, m.norm_w, m.norm_b, kLayerNormEps, x);
  }
  Tensor up = Tensor::empty({blocks, merged}, dtype, device);
  ops::linear(x.reshape({blocks, merged}), m.fc1_w, m.fc1_b, up);
  ops::gelu(up, ops::GeluApproximation::kNone, up);
  Tensor out = Tensor::empty({blocks, config_.out_hidden_size}, dtype, device);
  ops::linear(up, m.fc2_w, m.fc2_b, out);
  return host_f32(out);
}

Tensor VisionEncoder::position_embedding(std::span<const VisionGrid> grids, int64_t patches) const {
  const int64_t hidden = config_.hidden_size, m = config_.spatial_merge_size;
  const int64_t side = std::lround(std::sqrt(static_cast<double>(config_.num_position_embeddings)));
  Tensor out = Tensor::empty({patches, hidden}, DType::kF32);
  float* o = out.data<float>();
  const float* table = pos_embed_.data<float>();
  std::vector<float> grid_rows;
  for (const VisionGrid& g : grids) {
    const int64_t t = g[0], h = g[1], w = g[2];
    const std::vector<float> hs = linspace(side, h), ws = linspace(side, w);
    // The h x w interpolated rows, row-major.
    grid_rows.assign(static_cast<size_t>(h * w * hidden), 0.0f);
    for (int64_t r = 0; r < h; ++r) {
      const int64_t r0 = static_cast<int64_t>(hs[r]), r1 = std::min(r0 + 1, side - 1);
      const float dr = hs[r] - static_cast<float>(r0);
      for (int64_t c = 0; c < w; ++c) {
        const int64_t c0 = static_cast<int64_t>(ws[c]), c1 = std::min(c0 + 1, side - 1);
        const float dc = ws[c] - static_cast<float>(c0);
        const int64_t corner[4] = {r0 * side + c0, r0 * side + c1, r1 * side + c0, r1 * side + c1};
        const float weight[4] = {(1.0f - dr) * (1.0f - dc), (1.0f - dr) * dc, dr * (1.0f - dc), dr * dc};
        float* dst = grid_rows.data() + (r * w + c) * hidden;
        for (int k = 0; k < 4; ++k) {
          const float* src = table + corner[k] * hidden;
          for (int64_t i = 0; i < hidden; ++i) dst[i] += src[i] * weight[k];
        }
      }
    }
    // Patch order: per temporal slice, the merge blocks row-major, each block's patches row-major.
    for (int64_t s = 0; s < t; ++s) {
      for (int64_t br = 0; br < h / m; ++br) {
        for (int64_t bc = 0; bc < w / m; ++bc) {
          for (int64_t ir = 0; ir < m; ++ir) {
            for (int64_t ic = 0; ic < m; ++ic, o += hidden) {
              const float* src = grid_rows.data() + ((br * m + ir) * w + bc * m + ic) * hidden;
              std::copy(src, src + hidden, o);
            }
          }
        }
      }
    }
  }
  return out;
}

VisionRows VisionEncoder::encode(const Tensor& patches, std::span<const VisionGrid> grids) const {
  const int64_t hidden = config_.hidden_size, heads = config_.num_heads, hd = hidden / heads;
  const int64_t m = config_.spatial_merge_size;
  int64_t total = 0;
  for (size_t i = 0; i < grids.size(); ++i) {
    const VisionGrid& g = grids[i];
    if (g[0] <= 0 || g[1] <= 0 || g[2] <= 0 || g[1] % m != 0 || g[2] % m != 0) {
      throw_error(ErrorCode::kInvalidArgument, "medium {}: the grid {} x {} x {} does not fit the {} x {} merge", i,
                  g[0], g[1], g[2], m, m);
    }
    total += g[0] * g[1] * g[2];
  }
  if (patches.dim(0) != total || patches.dim(1) != config_.patch_values()) {
    throw_error(ErrorCode::kInvalidArgument, "the patches [{}, {}] do not fit the grids ({} patches of {} values)",
                patches.dim(0), patches.dim(1), total, config_.patch_values());
  }

  // 1-2: patch embedding plus the interpolated learned positions.
  const auto [device, dtype] = placement_;
  Tensor h = Tensor::empty({total, hidden}, dtype, device);
  ops::linear(place(patches, dtype, device), patch_w_, patch_b_, h);
  ops::add(h, place(position_embedding(grids, total), dtype, device), h);

  // The rotary angles of every patch: the first hd/4 frequencies by its row, the next hd/4 by its column.
  const int64_t quarter = hd / 4, half = hd / 2;
  std::vector<float> inv_freq(static_cast<size_t>(quarter));
  for (int64_t j = 0; j < quarter; ++j) {
    inv_freq[j] = static_cast<float>(1.0 / std::pow(static_cast<double>(config_.rope_theta),
                                                    static_cast<double>(2 * j) / static_cast<double>(half)));
  }
  Tensor cos_host = Tensor::empty({total, half}, DType::kF32), sin_host = Tensor::empty({total, half}, DType::kF32);
  std::vector<int64_t> segments;  // the attention segments: one per temporal slice of each medium
  {
    float *cos = cos_host.data<float>(), *sin = sin_host.data<float>();
    int64_t p = 0;
    for (const VisionGrid& g : grids) {
      for (int64_t s = 0; s < g[0]; ++s) {
        segments.push_back(g[1] * g[2]);
        for (int64_t br = 0; br < g[1] / m; ++br) {
          for (int64_t bc = 0; bc < g[2] / m; ++bc) {
            for (int64_t ir = 0; ir < m; ++ir) {
              for (int64_t ic = 0; ic < m; ++ic, ++p) {
                const float row = static_cast<float>(br * m + ir), col = static_cast<float>(bc * m + ic);
                for (int64_t j = 0; j < quarter; ++j) {
                  const float a = row * inv_freq[j], b = col * inv_freq[j];
                  cos[p * half + j] = std::cos(a);
                  sin[p * half + j] = std::sin(a);
                  cos[p * half + quarter + j] = std::cos(b);
                  sin[p * half + quarter + j] = std::sin(b);
                }
              }
            }
          }
        }
      }
    }
  }
  const Tensor cos = place(cos_host, DType::kF32, device), sin = place(sin_host, DType::kF32, device);

  // 3-4: the blocks, with the DeepStack mergers after theirs.
  VisionRows out;
  out.deepstack.resize(config_.deepstack_visual_indexes.size());
  Tensor x = Tensor::empty({total, hidden}, dtype, device), qkv = Tensor::empty({total, 3 * hidden}, dtype, device);
  Tensor q = Tensor::empty({total, heads, hd}, dtype, device), k = Tensor::empty({total, heads, hd}, dtype, device);
  Tensor v = Tensor::empty({total, heads, hd}, dtype, device), attn = Tensor::empty({total, heads, hd}, dtype, device);
  Tensor branch = Tensor::empty({total, hidden}, dtype, device);
  Tensor up = Tensor::empty({total, config_.intermediate_size}, dtype, device);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (size_t b = 0; b < blocks_.size(); ++b) {
    const Block& l = blocks_[b];
    ops::layer_norm(h, l.norm1_w, l.norm1_b, kLayerNormEps, x);
    ops::linear(x, l.qkv_w, l.qkv_b, qkv);
    Tensor q_rows = q.reshape({total, hidden}), k_rows = k.reshape({total, hidden}), v_rows = v.reshape({total, hidden});
    ops::copy_columns(qkv, 0, q_rows, 0, hidden);
    ops::copy_columns(qkv, hidden, k_rows, 0, hidden);
    ops::copy_columns(qkv, 2 * hidden, v_rows, 0, hidden);
    ops::rotate_pairs(q, cos, sin);
    ops::rotate_pairs(k, cos, sin);
    int64_t start = 0;
    for (int64_t len : segments) {
      Tensor os = attn.slice_rows(start, start + len);
      ops::attention(q.slice_rows(start, start + len), k.slice_rows(start, start + len),
                     v.slice_rows(start, start + len), scale, os);
      start += len;
    }
    ops::linear(attn.reshape({total, hidden}), l.proj_w, l.proj_b, branch);
    ops::add(h, branch, h);
    ops::layer_norm(h, l.norm2_w, l.norm2_b, kLayerNormEps, x);
    ops::linear(x, l.fc1_w, l.fc1_b, up);
    ops::gelu(up, ops::GeluApproximation::kTanh, up);
    ops::linear(up, l.fc2_w, l.fc2_b, branch);
    ops::add(h, branch, h);
    for (size_t d = 0; d < config_.deepstack_visual_indexes.size(); ++d) {
      if (config_.deepstack_visual_indexes[d] == static_cast<int>(b)) {
        out.deepstack[d] = merge(deepstack_mergers_[d], h, /*norm_after_merge=*/true);
      }
    }
  }

  // 5: the final merger.
  out.rows = merge(merger_, h, /*norm_after_merge=*/false);
  return out;
}

}  // namespace omni::model::qwen3_omni
