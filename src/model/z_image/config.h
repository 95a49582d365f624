// The configuration of a Z-Image checkpoint in the diffusers layout: model_index.json and the
// config files of transformer/ (ZImageTransformer2DModel), vae/ (AutoencoderKL) and scheduler/
// (FlowMatchEulerDiscreteScheduler). text_encoder/ and tokenizer/ are a Qwen3 model and tokenizer
// read by their own loaders. docs/models/z_image.md describes the model.
#pragma once

#include <array>
#include <filesystem>
#include <string>
#include <vector>

namespace omni::model::z_image {

struct TransformerConfig {
  int in_channels = 16;
  int dim = 3840;
  int n_layers = 30;
  int n_refiner_layers = 2;
  int n_heads = 30;
  float norm_eps = 1e-5f;
  bool qk_norm = true;
  int cap_feat_dim = 2560;
  float rope_theta = 256.0f;
  float t_scale = 1000.0f;
  std::array<int, 3> axes_dims{32, 48, 48};
  std::array<int, 3> axes_lens{1024, 512, 512};
  int patch_size = 2;  // all_patch_size / all_f_patch_size: one pair, (2, 1)

  int head_dim() const { return dim / n_heads; }
  int adaln_dim() const { return dim < 256 ? dim : 256; }  // min(dim, 256): the modulation input
  int ffn_dim() const { return static_cast<int>(static_cast<double>(dim) / 3 * 8); }
  int patch_features() const { return patch_size * patch_size * in_channels; }
};

struct VaeDecoderConfig {
  int latent_channels = 16;
  int out_channels = 3;
  std::vector<int> block_out_channels{128, 256, 512, 512};
  int layers_per_block = 2;
  int norm_num_groups = 32;
  float scaling_factor = 0.3611f;
  float shift_factor = 0.1159f;
  bool use_post_quant_conv = false;
  bool mid_block_add_attention = true;
  // config.json's sample_size (diffusers' default 32): the image side of one tile in tiled decoding
  // (vae_tiling.h). 0 when the config gives a list, which diffusers' tiled decode cannot take.
  int sample_size = 32;

  // Each up block but the last doubles the size.
  int scale_factor() const { return 1 << (static_cast<int>(block_out_channels.size()) - 1); }
};

struct SchedulerConfig {
  int num_train_timesteps = 1000;
  float shift = 3.0f;
};

struct ZImageConfig {
  std::string pipeline_class;  // model_index.json's _class_name
  TransformerConfig transformer;
  VaeDecoderConfig vae;
  SchedulerConfig scheduler;

  // Image sides must be multiples of this (the VAE's factor times the patch size), as the pipeline
  // checks.
  int size_multiple() const { return vae.scale_factor() * transformer.patch_size; }
  // The latents of an image of height x width: [in_channels, height / f, width / f].
  int latent_side(int pixels) const { return pixels / vae.scale_factor(); }
};

// Reads the checkpoint's configuration. Throws omni::Error(kLoadFailed) naming the file and field
// that is missing or malformed, kUnsupported for a variant this implementation does not run
// (dynamic shifting, several patch sizes, a SigLIP branch, a VAE with (post-)quant convolutions of
// another shape).
ZImageConfig read_config(const std::filesystem::path& dir);

}  // namespace omni::model::z_image
