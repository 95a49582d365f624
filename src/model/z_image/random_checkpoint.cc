#include "model/z_image/random_checkpoint.h"

#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "base/splitmix64.h"
#include "model/random_checkpoint.h"
#include "model/safetensors_writer.h"

namespace omni::model::z_image {

namespace fs = std::filesystem;

namespace {

constexpr int kLatent = 16;

// The widths and depths that differ between the demo and the released checkpoint.
struct Shapes {
  int dim, heads, layers, refiners, cap_dim;
  std::vector<int> axes_dims, axes_lens;
  std::vector<int> vae_channels;  // four blocks: 8x, as released
  int vae_groups, vae_layers_per_block;
};

Shapes demo_shapes() { return {64, 2, 3, 2, 64, {8, 12, 12}, {1024, 64, 64}, {32, 32, 64, 64}, 8, 1}; }
Shapes released_shapes() {
  return {3840, 30, 30, 2, 2560, {32, 48, 48}, {1536, 512, 512}, {128, 256, 512, 512}, 32, 2};
}

// Weights drawn uniformly in [-s, s) with s = 1 / sqrt(fan_in); norm scales near 1.
class Weights {
 public:
  explicit Weights(uint64_t seed) : writer_(tensor::DType::kBF16), bits_(seed) {}

  void matrix(const std::string& name, const tensor::Shape& shape) {
    int64_t n = 1, fan_in = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
      n *= shape[i];
      if (i > 0) fan_in *= shape[i];
    }
    fill(name, shape, n, 1.0f / std::sqrt(static_cast<float>(fan_in)), 0.0f);
  }
  void bias(const std::string& name, int64_t n) { fill(name, {n}, n, 0.05f, 0.0f); }
  void norm(const std::string& name, int64_t n) { fill(name, {n}, n, 0.1f, 1.0f); }
  void linear(const std::string& name, int64_t out, int64_t in, bool with_bias) {
    matrix(name + ".weight", {out, in});
    if (with_bias) bias(name + ".bias", out);
  }
  void write(const fs::path& path) const { writer_.write(path); }

 private:
  void fill(const std::string& name, const tensor::Shape& shape, int64_t n, float scale, float offset) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = offset + scale * (static_cast<float>(bits_.next() >> 40) * (2.0f / 16777216.0f) - 1.0f);
    writer_.add(name, shape, v.data());
  }

  SafetensorsWriter writer_;
  SplitMix64 bits_;
};

void write_transformer(const fs::path& dir, uint64_t seed, const Shapes& s) {
  fs::create_directories(dir);
  const int kDim = s.dim, kHeads = s.heads, kLayers = s.layers, kRefiners = s.refiners, kCapDim = s.cap_dim;
  const int ffn = static_cast<int>(static_cast<double>(kDim) / 3 * 8), hd = kDim / kHeads;
  const int adaln = kDim < 256 ? kDim : 256;
  const int patch = 2 * 2 * kLatent;
  Weights w(seed);
  w.linear("t_embedder.mlp.0", 1024, 256, true);
  w.linear("t_embedder.mlp.2", adaln, 1024, true);
  w.norm("cap_embedder.0.weight", kCapDim);
  w.linear("cap_embedder.1", kDim, kCapDim, true);
  w.linear("all_x_embedder.2-1", kDim, patch, true);
  w.matrix("x_pad_token", {1, kDim});
  w.matrix("cap_pad_token", {1, kDim});
  w.linear("all_final_layer.2-1.adaLN_modulation.1", kDim, adaln, true);
  w.linear("all_final_layer.2-1.linear", patch, kDim, true);
  auto block = [&](const std::string& p, bool modulated) {
    for (const char* m : {"to_q", "to_k", "to_v"}) w.linear(p + "attention." + m, kDim, kDim, false);
    w.linear(p + "attention.to_out.0", kDim, kDim, false);
    w.norm(p + "attention.norm_q.weight", hd);
    w.norm(p + "attention.norm_k.weight", hd);
    for (const char* n : {"attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2"}) w.norm(p + n + ".weight", kDim);
    w.linear(p + "feed_forward.w1", ffn, kDim, false);
    w.linear(p + "feed_forward.w3", ffn, kDim, false);
    w.linear(p + "feed_forward.w2", kDim, ffn, false);
    if (modulated) w.linear(p + "adaLN_modulation.0", 4 * kDim, adaln, true);
  };
  for (int i = 0; i < kRefiners; ++i) {
    block("noise_refiner." + std::to_string(i) + ".", true);
    block("context_refiner." + std::to_string(i) + ".", false);
  }
  for (int i = 0; i < kLayers; ++i) block("layers." + std::to_string(i) + ".", true);
  w.write(dir / "diffusion_pytorch_model.safetensors");
  write_json(dir / "config.json", {{"_class_name", "ZImageTransformer2DModel"},
                                   {"all_patch_size", {2}},
                                   {"all_f_patch_size", {1}},
                                   {"in_channels", kLatent},
                                   {"dim", kDim},
                                   {"n_layers", kLayers},
                                   {"n_refiner_layers", kRefiners},
                                   {"n_heads", kHeads},
                                   {"n_kv_heads", kHeads},
                                   {"norm_eps", 1e-5},
                                   {"qk_norm", true},
                                   {"cap_feat_dim", kCapDim},
                                   {"rope_theta", 256.0},
                                   {"t_scale", 1000.0},
                                   {"axes_dims", s.axes_dims},
                                   {"axes_lens", s.axes_lens}});
}

void write_vae(const fs::path& dir, uint64_t seed, const Shapes& s) {
  fs::create_directories(dir);
  const std::vector<int>& kVaeChannels = s.vae_channels;
  Weights w(seed);
  auto conv = [&](const std::string& name, int out, int in, int k) {
    w.matrix(name + ".weight", {out, in, k, k});
    w.bias(name + ".bias", out);
  };
  auto group_norm = [&](const std::string& name, int c) {
    w.norm(name + ".weight", c);
    w.bias(name + ".bias", c);
  };
  auto resnet = [&](const std::string& name, int in, int out) {
    group_norm(name + ".norm1", in);
    conv(name + ".conv1", out, in, 3);
    group_norm(name + ".norm2", out);
    conv(name + ".conv2", out, out, 3);
    if (in != out) conv(name + ".conv_shortcut", out, in, 1);
  };
  const int top = kVaeChannels.back(), blocks = static_cast<int>(kVaeChannels.size());
  conv("decoder.conv_in", top, kLatent, 3);
  resnet("decoder.mid_block.resnets.0", top, top);
  resnet("decoder.mid_block.resnets.1", top, top);
  group_norm("decoder.mid_block.attentions.0.group_norm", top);
  for (const char* m : {"to_q", "to_k", "to_v", "to_out.0"}) w.linear(std::string("decoder.mid_block.attentions.0.") + m, top, top, true);
  int prev = top;
  for (int i = 0; i < blocks; ++i) {
    const int out = kVaeChannels[blocks - 1 - i];
    for (int j = 0; j <= s.vae_layers_per_block; ++j)
      resnet("decoder.up_blocks." + std::to_string(i) + ".resnets." + std::to_string(j), j == 0 ? prev : out, out);
    if (i + 1 < blocks) conv("decoder.up_blocks." + std::to_string(i) + ".upsamplers.0.conv", out, out, 3);
    prev = out;
  }
  group_norm("decoder.conv_norm_out", kVaeChannels.front());
  conv("decoder.conv_out", 3, kVaeChannels.front(), 3);
  w.write(dir / "diffusion_pytorch_model.safetensors");
  write_json(dir / "config.json",
             {{"_class_name", "AutoencoderKL"},
              {"in_channels", 3},
              {"out_channels", 3},
              {"down_block_types", std::vector<std::string>(kVaeChannels.size(), "DownEncoderBlock2D")},
              {"up_block_types", std::vector<std::string>(kVaeChannels.size(), "UpDecoderBlock2D")},
              {"block_out_channels", kVaeChannels},
              {"layers_per_block", s.vae_layers_per_block},
              {"act_fn", "silu"},
              {"latent_channels", kLatent},
              {"norm_num_groups", s.vae_groups},
              {"sample_size", 1024},
              {"scaling_factor", 0.3611},
              {"shift_factor", 0.1159},
              {"use_quant_conv", false},
              {"use_post_quant_conv", false},
              {"mid_block_add_attention", true}});
}

}  // namespace

void write_random_checkpoint(const fs::path& dir, uint64_t seed, const fs::path& qwen3_tokenizer_dir, bool released) {
  const Shapes shapes = released ? released_shapes() : demo_shapes();
  fs::create_directories(dir);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
    if (!fs::exists(qwen3_tokenizer_dir / file)) {
      throw_error(ErrorCode::kNotFound, "{}: no {} (the Qwen3 tokenizer the demo checkpoint takes)",
                  qwen3_tokenizer_dir.string(), file);
    }
    fs::create_directories(dir / "tokenizer");
    fs::copy_file(qwen3_tokenizer_dir / file, dir / "tokenizer" / file, fs::copy_options::overwrite_existing);
  }
  TextModelConfig text = qwen3_0_6b_shapes();
  if (released) {
    // Qwen3-4B.
    text.hidden_size = 2560;
    text.num_hidden_layers = 36;
    text.num_attention_heads = 32;
    text.num_key_value_heads = 8;
    text.head_dim = 128;
    text.intermediate_size = 9728;
  } else {
    text.hidden_size = shapes.cap_dim;
    text.num_hidden_layers = 3;
    text.num_attention_heads = 4;
    text.num_key_value_heads = 2;
    text.head_dim = 16;
    text.intermediate_size = 128;
  }
  write_random_qwen3_checkpoint(dir / "text_encoder", text, seed, tensor::DType::kBF16);
  write_transformer(dir / "transformer", seed + 1, shapes);
  write_vae(dir / "vae", seed + 2, shapes);
  fs::create_directories(dir / "scheduler");
  write_json(dir / "scheduler" / "scheduler_config.json",
             {{"_class_name", "FlowMatchEulerDiscreteScheduler"}, {"num_train_timesteps", 1000}, {"shift", 3.0},
              {"use_dynamic_shifting", false}});
  write_json(dir / "model_index.json", {{"_class_name", "ZImagePipeline"},
                                        {"scheduler", {"diffusers", "FlowMatchEulerDiscreteScheduler"}},
                                        {"text_encoder", {"transformers", "Qwen3ForCausalLM"}},
                                        {"tokenizer", {"transformers", "Qwen2Tokenizer"}},
                                        {"transformer", {"diffusers", "ZImageTransformer2DModel"}},
                                        {"vae", {"diffusers", "AutoencoderKL"}}});
}

}  // namespace omni::model::z_image
