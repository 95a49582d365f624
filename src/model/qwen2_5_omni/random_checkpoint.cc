#include "model/qwen2_5_omni/random_checkpoint.h"

#include <cmath>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/splitmix64.h"
#include "model/qwen2_5_omni/bigvgan.h"
#include "model/qwen2_5_omni/dit.h"
#include "model/random_checkpoint.h"
#include "model/safetensors_writer.h"

namespace omni::model::qwen2_5_omni {

namespace {

OrderedJson dit_json(const DitConfig& c) {
  return {{"model_type", "qwen2_5_omni_dit"},
          {"hidden_size", c.hidden_size},
          {"num_hidden_layers", c.num_hidden_layers},
          {"num_attention_heads", c.num_attention_heads},
          {"head_dim", c.head_dim},
          {"ff_mult", c.ff_mult},
          {"emb_dim", c.emb_dim},
          {"num_embeds", c.num_embeds},
          {"repeats", c.repeats},
          {"mel_dim", c.mel_dim},
          {"block_size", c.block_size},
          {"look_ahead_layers", c.look_ahead_layers},
          {"look_backward_layers", c.look_backward_layers},
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", c.rope_theta}}},
          {"max_position_embeddings", 32768},
          {"dropout", 0.1},
          {"enc_emb_dim", c.enc_emb_dim},
          {"enc_dim", c.enc_dim},
          {"enc_channels", c.enc_channels},
          {"enc_kernel_sizes", c.enc_kernel_sizes},
          {"enc_dilations", c.enc_dilations},
          {"enc_attention_channels", c.enc_attention_channels},
          {"enc_res2net_scale", c.enc_res2net_scale},
          {"enc_se_channels", c.enc_se_channels}};
}

OrderedJson bigvgan_json(const BigVganConfig& c) {
  return {{"model_type", "qwen2_5_omni_bigvgan"},
          {"mel_dim", c.mel_dim},
          {"upsample_initial_channel", c.upsample_initial_channel},
          {"upsample_rates", c.upsample_rates},
          {"upsample_kernel_sizes", c.upsample_kernel_sizes},
          {"resblock_kernel_sizes", c.resblock_kernel_sizes},
          {"resblock_dilation_sizes", c.resblock_dilation_sizes}};
}

}  // namespace

Token2WavConfig tiny_token2wav_config() {
  Token2WavConfig c;
  DitConfig& d = c.dit;
  d.hidden_size = 32;
  d.num_hidden_layers = 4;
  d.num_attention_heads = 4;
  d.head_dim = 16;
  d.ff_mult = 2;
  d.emb_dim = 16;
  d.num_embeds = 40;
  d.repeats = 2;
  d.mel_dim = 20;
  d.block_size = 4;
  d.look_ahead_layers = {2};
  d.look_backward_layers = {0, 3};
  d.enc_emb_dim = 12;
  d.enc_dim = 8;
  d.enc_channels = {16, 16, 16, 48};
  d.enc_kernel_sizes = {5, 3, 3, 1};
  d.enc_dilations = {1, 2, 3, 1};
  d.enc_attention_channels = 8;
  d.enc_res2net_scale = 2;
  d.enc_se_channels = 8;
  BigVganConfig& b = c.bigvgan;
  b.mel_dim = 20;
  b.upsample_initial_channel = 32;
  b.upsample_rates = {5, 3, 2};
  b.upsample_kernel_sizes = {11, 7, 4};
  b.resblock_kernel_sizes = {3, 7};
  b.resblock_dilation_sizes = {{1, 3, 5}, {1, 3, 5}};
  return c;
}

void write_random_token2wav_checkpoint(const std::filesystem::path& dir, const Token2WavConfig& config, uint64_t seed) {
  std::filesystem::create_directories(dir);
  SafetensorsWriter writer(tensor::DType::kF32);
  RandomTensors random(writer, seed);
  auto add = [&](const std::string& name, const tensor::Shape& shape, float stddev, float mean = 0.0f) {
    random.add(name, shape, stddev, mean);
  };
  auto fan = [](int64_t in) { return 1.0f / std::sqrt(static_cast<float>(in)); };
  auto linear = [&](const std::string& name, int64_t out, int64_t in) {
    add(name + ".weight", {out, in}, fan(in));
    add(name + ".bias", {out}, 0.02f);
  };
  auto conv = [&](const std::string& name, int64_t out, int64_t in, int64_t k) {
    add(name + ".weight", {out, in, k}, fan(in * k));
    add(name + ".bias", {out}, 0.02f);
  };

  const DitConfig& d = config.dit;
  const std::string p = kDitPrefix;
  const int64_t h = d.hidden_size, inner = d.inner_dim();
  add(p + "text_embed.codec_embed.weight", {d.num_embeds + 1, d.emb_dim}, 1.0f);
  linear(p + "time_embed.time_mlp.0", h, 256);
  linear(p + "time_embed.time_mlp.2", h, h);
  linear(p + "input_embed.proj", h, int64_t{d.mel_dim} + d.enc_dim + d.emb_dim + d.enc_emb_dim);
  // The ECAPA-TDNN (model/qwen3_tts/speaker_encoder.h's layout).
  const std::string e = p + "input_embed.spk_encoder.";
  const size_t n = d.enc_channels.size();
  conv(e + "blocks.0.conv", d.enc_channels[0], d.mel_dim, d.enc_kernel_sizes[0]);
  int64_t mfa_in = 0;
  for (size_t i = 1; i + 1 < n; ++i) {
    const std::string b = e + "blocks." + std::to_string(i) + ".";
    const int64_t ch = d.enc_channels[i], chunk = ch / d.enc_res2net_scale;
    conv(b + "tdnn1.conv", ch, d.enc_channels[i - 1], 1);
    for (int j = 0; j + 1 < d.enc_res2net_scale; ++j) {
      conv(b + "res2net_block.blocks." + std::to_string(j) + ".conv", chunk, chunk, d.enc_kernel_sizes[i]);
    }
    conv(b + "tdnn2.conv", ch, ch, 1);
    conv(b + "se_block.conv1", d.enc_se_channels, ch, 1);
    conv(b + "se_block.conv2", ch, d.enc_se_channels, 1);
    mfa_in += ch;
  }
  const int64_t last = d.enc_channels.back();
  conv(e + "mfa.conv", last, mfa_in, d.enc_kernel_sizes.back());
  conv(e + "asp.tdnn.conv", d.enc_attention_channels, 3 * last, 1);
  conv(e + "asp.conv", last, d.enc_attention_channels, 1);
  conv(e + "fc", d.enc_dim, 2 * last, 1);
  for (int l = 0; l < d.num_hidden_layers; ++l) {
    const std::string b = p + "transformer_blocks." + std::to_string(l) + ".";
    linear(b + "attn_norm.linear", 6 * h, h);
    linear(b + "attn.to_q", inner, h);
    linear(b + "attn.to_k", inner, h);
    linear(b + "attn.to_v", inner, h);
    linear(b + "attn.to_out.0", h, inner);
    linear(b + "ff.ff.0", d.ff_dim(), h);
    linear(b + "ff.ff.3", h, d.ff_dim());
  }
  linear(p + "norm_out.linear", 2 * h, h);
  linear(p + "proj_out", d.mel_dim, h);

  const BigVganConfig& v = config.bigvgan;
  const std::string g = kBigVganPrefix;
  conv(g + "conv_pre", v.upsample_initial_channel, v.mel_dim, 7);
  for (size_t s = 0; s < v.upsample_rates.size(); ++s) {
    const int64_t in = v.upsample_initial_channel >> s, out = v.stage_channels(static_cast<int>(s));
    const int64_t k = v.upsample_kernel_sizes[s];
    add(g + "ups." + std::to_string(s) + ".0.weight", {in, out, k}, fan(in * k / v.upsample_rates[s]));
    add(g + "ups." + std::to_string(s) + ".0.bias", {out}, 0.02f);
    for (size_t j = 0; j < v.resblock_kernel_sizes.size(); ++j) {
      const std::string r = g + "resblocks." + std::to_string(s * v.resblock_kernel_sizes.size() + j) + ".";
      for (int i = 0; i < 3; ++i) {
        conv(r + "convs1." + std::to_string(i), out, out, v.resblock_kernel_sizes[j]);
        conv(r + "convs2." + std::to_string(i), out, out, v.resblock_kernel_sizes[j]);
      }
      for (int a = 0; a < 6; ++a) {
        add(r + "activations." + std::to_string(a) + ".act.alpha", {out}, 0.1f);
        add(r + "activations." + std::to_string(a) + ".act.beta", {out}, 0.1f);
      }
    }
  }
  const int64_t post = v.stage_channels(static_cast<int>(v.upsample_rates.size()) - 1);
  add(g + "activation_post.act.alpha", {post}, 0.1f);
  add(g + "activation_post.act.beta", {post}, 0.1f);
  // A tenth of the usual scale: a waveform mostly inside the final clamp.
  add(g + "conv_post.weight", {1, post, 7}, 0.1f * fan(post * 7));
  writer.write(dir / "model.safetensors");

  const OrderedJson json = {{"architectures", {"Qwen2_5OmniModel"}},
                            {"model_type", "qwen2_5_omni"},
                            {"enable_audio_output", true},
                            {"token2wav_config",
                             {{"model_type", "qwen2_5_omni_token2wav"},
                              {"dit_config", dit_json(config.dit)},
                              {"bigvgan_config", bigvgan_json(config.bigvgan)}}}};
  write_json(dir / "config.json", json);
}

}  // namespace omni::model::qwen2_5_omni
