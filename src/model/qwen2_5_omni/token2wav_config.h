// The shapes of Qwen2.5-Omni's token2wav stage, read from `token2wav_config` of the checkpoint's
// config.json (transformers' Qwen2_5OmniToken2WavConfig): the DiT that turns talker codes into a
// mel spectrogram by flow matching (`dit_config`) and the BigVGAN vocoder that turns the mel into
// 24 kHz audio (`bigvgan_config`). Defaults are the released Qwen2.5-Omni-7B values, so a field
// a config.json leaves out means what transformers would make of it.
#pragma once

#include <string>
#include <vector>

#include "base/json.h"

namespace omni::model::qwen2_5_omni {

struct DitConfig {
  int hidden_size = 1024;
  int num_hidden_layers = 22;
  int num_attention_heads = 16;
  int head_dim = 64;
  int ff_mult = 2;
  int emb_dim = 512;      // the code embedding's width
  int num_embeds = 8193;  // codes 0..num_embeds (the table has num_embeds + 1 rows)
  int repeats = 2;        // mel frames per code
  int mel_dim = 80;
  int block_size = 24;  // mel frames per attention block
  std::vector<int> look_ahead_layers = {10};
  std::vector<int> look_backward_layers = {0, 20};
  float rope_theta = 10000.0f;
  // The ECAPA-TDNN over the reference mel (input_embed.spk_encoder) and the x-vector width.
  int enc_emb_dim = 192;  // the speaker x-vector ("cond" of spk_dict.pt)
  int enc_dim = 128;      // the ECAPA output
  std::vector<int> enc_channels = {256, 256, 256, 256, 768};
  std::vector<int> enc_kernel_sizes = {5, 3, 3, 3, 1};
  std::vector<int> enc_dilations = {1, 2, 3, 4, 1};
  int enc_attention_channels = 64;
  int enc_res2net_scale = 2;
  int enc_se_channels = 64;

  int inner_dim() const { return head_dim * num_attention_heads; }
  int ff_dim() const { return hidden_size * ff_mult; }
  // Blocks layer `layer` sees ahead of and behind a query's block (0 or 1).
  int look_ahead(int layer) const;
  int look_backward(int layer) const;
};

struct BigVganConfig {
  int mel_dim = 80;
  int upsample_initial_channel = 1536;
  std::vector<int> upsample_rates = {5, 3, 2, 2, 2, 2};
  std::vector<int> upsample_kernel_sizes = {11, 7, 4, 4, 4, 4};
  std::vector<int> resblock_kernel_sizes = {3, 7, 11};
  std::vector<std::vector<int>> resblock_dilation_sizes = {{1, 3, 5}, {1, 3, 5}, {1, 3, 5}};

  // Output samples per mel frame: the product of the upsampling rates (240 released).
  int hop() const;
  // The channels after upsampling stage `stage` (0-based): upsample_initial_channel / 2^(stage + 1).
  int stage_channels(int stage) const;
};

struct Token2WavConfig {
  DitConfig dit;
  BigVganConfig bigvgan;
};

// Reads `token2wav_config` from a Qwen2.5-Omni config.json; `file` names it in errors
// (kLoadFailed naming the field: a missing token2wav_config, a wrong type, inconsistent shapes).
Token2WavConfig parse_token2wav_config(const Json& config, const std::string& file);

}  // namespace omni::model::qwen2_5_omni
