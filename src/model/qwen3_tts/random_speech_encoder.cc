#include "model/qwen3_tts/random_speech_encoder.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace omni::model::qwen3_tts {

SpeechEncoderConfig small_speech_encoder_shapes(int codebook_size) {
  SpeechEncoderConfig c;
  c.num_filters = 4;
  c.hidden_size = 16;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.intermediate_size = 32;
  c.codebook_size = codebook_size;
  c.codebook_dim = 8;
  c.num_quantizers = 16;
  c.valid_quantizers = 16;
  return c;
}

void add_random_speech_encoder(SafetensorsWriter& writer, const SpeechEncoderConfig& c, uint64_t seed) {
  std::mt19937_64 bits(seed);
  auto uniform = [&] { return static_cast<float>(bits() >> 40) * (2.0f / 16777216.0f) - 1.0f; };  // [-1, 1)
  std::vector<float> buf;
  auto add = [&](const std::string& name, const tensor::Shape& shape, float stddev, float mean = 0.0f) {
    buf.resize(static_cast<size_t>(tensor::shape_numel(shape)));
    const float a = stddev * std::sqrt(3.0f);
    for (float& v : buf) v = mean + a * uniform();
    writer.add(name, shape, buf.data());
  };
  auto inv_sqrt = [](int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
  auto conv = [&](const std::string& name, int64_t in, int64_t out, int64_t k, bool bias = true) {
    add(name + ".weight", {out, in, k}, inv_sqrt(in * k));
    if (bias) add(name + ".bias", {out}, 0.05f);
  };
  const std::string enc = "encoder.encoder.layers.";
  int index = 0;
  conv(enc + std::to_string(index++) + ".conv", 1, c.num_filters, c.kernel_size);
  int64_t channels = c.num_filters;
  for (auto it = c.upsampling_ratios.rbegin(); it != c.upsampling_ratios.rend(); ++it) {
    for (int j = 0; j < c.num_residual_layers; ++j) {
      const std::string p = enc + std::to_string(index++) + ".block.";
      conv(p + "1.conv", channels, channels / c.compress, c.residual_kernel_size);
      conv(p + "3.conv", channels / c.compress, channels, 1);
    }
    ++index;  // ELU
    conv(enc + std::to_string(index++) + ".conv", channels, channels * 2, *it * 2);
    channels *= 2;
  }
  ++index;  // ELU
  conv(enc + std::to_string(index) + ".conv", channels, c.hidden_size, c.last_kernel_size);
  const int64_t h = c.hidden_size, qd = int64_t{c.num_attention_heads} * c.head_dim,
                kvd = int64_t{c.num_key_value_heads} * c.head_dim;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "encoder.encoder_transformer.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {h}, 0.1f, 1.0f);
    add(p + "input_layernorm.bias", {h}, 0.05f);
    add(p + "post_attention_layernorm.weight", {h}, 0.1f, 1.0f);
    add(p + "post_attention_layernorm.bias", {h}, 0.05f);
    add(p + "self_attn.q_proj.weight", {qd, h}, inv_sqrt(h));
    add(p + "self_attn.k_proj.weight", {kvd, h}, inv_sqrt(h));
    add(p + "self_attn.v_proj.weight", {kvd, h}, inv_sqrt(h));
    add(p + "self_attn.o_proj.weight", {h, qd}, inv_sqrt(qd));
    add(p + "self_attn_layer_scale.scale", {h}, 0.05f, 0.3f);
    add(p + "mlp.fc1.weight", {c.intermediate_size, h}, inv_sqrt(h));
    add(p + "mlp.fc2.weight", {h, c.intermediate_size}, inv_sqrt(c.intermediate_size));
    add(p + "mlp_layer_scale.scale", {h}, 0.05f, 0.3f);
  }
  conv("encoder.downsample.conv", h, h, 2 * c.downsample_stride(), /*bias=*/false);
  const int semantic = c.num_semantic_quantizers;
  for (auto [name, layers] : {std::pair{"semantic", semantic}, std::pair{"acoustic", c.num_quantizers - semantic}}) {
    const std::string p = std::string("encoder.quantizer.") + name + "_residual_vector_quantizer.";
    if (c.codebook_dim != c.hidden_size) {
      add(p + "input_proj.weight", {c.codebook_dim, h, 1}, inv_sqrt(h));
      add(p + "output_proj.weight", {h, c.codebook_dim, 1}, inv_sqrt(c.codebook_dim));
    }
    for (int l = 0; l < layers; ++l) {
      const std::string cb = p + "layers." + std::to_string(l) + ".codebook.";
      add(cb + "cluster_usage", {c.codebook_size}, 0.3f, 1.0f);
      add(cb + "embed_sum", {c.codebook_size, c.codebook_dim}, 0.5f);
      add(cb + "initialized", {1}, 0.0f, 1.0f);
    }
  }
}

OrderedJson speech_encoder_config_json(const SpeechEncoderConfig& c) {
  return OrderedJson{{"model_type", "mimi"},
                     {"sampling_rate", c.sample_rate},
                     {"audio_channels", 1},
                     {"hidden_size", c.hidden_size},
                     {"num_filters", c.num_filters},
                     {"num_residual_layers", c.num_residual_layers},
                     {"upsampling_ratios", c.upsampling_ratios},
                     {"kernel_size", c.kernel_size},
                     {"last_kernel_size", c.last_kernel_size},
                     {"residual_kernel_size", c.residual_kernel_size},
                     {"dilation_growth_rate", c.dilation_growth_rate},
                     {"use_causal_conv", true},
                     {"pad_mode", "constant"},
                     {"compress", c.compress},
                     {"trim_right_ratio", 1.0},
                     {"codebook_size", c.codebook_size},
                     {"codebook_dim", c.codebook_dim},
                     {"vector_quantization_hidden_dimension", c.codebook_dim},
                     {"num_quantizers", c.num_quantizers},
                     {"num_semantic_quantizers", c.num_semantic_quantizers},
                     {"use_conv_shortcut", false},
                     {"num_hidden_layers", c.num_hidden_layers},
                     {"intermediate_size", c.intermediate_size},
                     {"num_attention_heads", c.num_attention_heads},
                     {"num_key_value_heads", c.num_key_value_heads},
                     {"head_dim", c.head_dim},
                     {"hidden_act", "gelu"},
                     {"norm_eps", c.norm_eps},
                     {"rope_theta", c.rope_theta},
                     {"sliding_window", c.sliding_window},
                     {"layer_scale_initial_scale", 0.01},
                     {"attention_bias", false},
                     {"frame_rate", c.frame_rate}};
}

}  // namespace omni::model::qwen3_tts
