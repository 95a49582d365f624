#include "model/qwen3_tts/random_codec.h"

#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "model/qwen3_tts/random_speech_encoder.h"
#include "model/safetensors_writer.h"

namespace omni::model::qwen3_tts {

CodecDecoderConfig small_codec_shapes() {
  CodecDecoderConfig c;
  c.codebook_dim = 32;
  c.latent_dim = 64;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 4;
  c.head_dim = 16;
  c.decoder_dim = 64;
  return c;
}

void write_random_codec_checkpoint(const std::filesystem::path& dir, const CodecDecoderConfig& c, uint64_t seed,
                                   const SpeechEncoderConfig* encoder) {
  std::filesystem::create_directories(dir);
  // mt19937_64's raw output is fixed by the standard (its distributions are not), so the
  // uniform values are built from the bits.
  std::mt19937_64 bits(seed);
  auto uniform = [&] { return static_cast<float>(bits() >> 40) * (2.0f / 16777216.0f) - 1.0f; };  // [-1, 1)
  SafetensorsWriter writer(tensor::DType::kF32);
  std::vector<float> buf;
  // Uniform in [mean - a, mean + a) with a = stddev * sqrt(3).
  auto add = [&](const std::string& name, const tensor::Shape& shape, float stddev, float mean = 0.0f) {
    buf.resize(static_cast<size_t>(tensor::shape_numel(shape)));
    const float a = stddev * std::sqrt(3.0f);
    for (float& v : buf) v = mean + a * uniform();
    writer.add(name, shape, buf.data());
  };
  auto inv_sqrt = [](int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };

  const int64_t half = c.codebook_dim / 2, vocab = c.codebook_size;
  const std::string q = "decoder.quantizer.";
  for (const char* group : {"rvq_first", "rvq_rest"}) {
    add(q + group + ".output_proj.weight", {c.codebook_dim, half, 1}, inv_sqrt(half));
    add(q + group + ".input_proj.weight", {half, c.codebook_dim, 1}, inv_sqrt(c.codebook_dim));
    const int layers = std::string(group) == "rvq_first" ? 1 : c.num_quantizers - 1;
    for (int i = 0; i < layers; ++i) {
      const std::string p = q + group + ".vq.layers." + std::to_string(i) + "._codebook.";
      // Usage counts around 2, entries around usage / sqrt(quantizers): the looked-up rows sum
      // to about unit scale.
      std::vector<float> usage(static_cast<size_t>(vocab));
      for (float& u : usage) u = 2.0f + 1.5f * uniform();
      writer.add(p + "cluster_usage", {vocab}, usage.data());
      buf.resize(static_cast<size_t>(vocab * half));
      const float a = std::sqrt(3.0f) * inv_sqrt(c.num_quantizers);
      for (int64_t e = 0; e < vocab; ++e)
        for (int64_t d = 0; d < half; ++d) buf[e * half + d] = usage[e] * a * uniform();
      writer.add(p + "embedding_sum", {vocab, half}, buf.data());
    }
  }
  const int64_t lat = c.latent_dim, hid = c.hidden_size, inter = c.intermediate_size;
  const int64_t qd = int64_t{c.num_attention_heads} * c.head_dim, kvd = int64_t{c.num_key_value_heads} * c.head_dim;
  add("decoder.pre_conv.conv.weight", {lat, c.codebook_dim, 3}, inv_sqrt(3 * c.codebook_dim));
  add("decoder.pre_conv.conv.bias", {lat}, 0.1f);
  const std::string t = "decoder.pre_transformer.";
  add(t + "input_proj.weight", {hid, lat}, inv_sqrt(lat));
  add(t + "input_proj.bias", {hid}, 0.1f);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = t + "layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {hid}, 0.1f, 1.0f);
    add(p + "post_attention_layernorm.weight", {hid}, 0.1f, 1.0f);
    add(p + "self_attn.q_proj.weight", {qd, hid}, 2.0f * inv_sqrt(hid));
    add(p + "self_attn.k_proj.weight", {kvd, hid}, 2.0f * inv_sqrt(hid));
    add(p + "self_attn.v_proj.weight", {kvd, hid}, inv_sqrt(hid));
    add(p + "self_attn.o_proj.weight", {hid, qd}, inv_sqrt(qd));
    add(p + "self_attn_layer_scale.scale", {hid}, 0.1f, 0.3f);
    add(p + "mlp.gate_proj.weight", {inter, hid}, inv_sqrt(hid));
    add(p + "mlp.up_proj.weight", {inter, hid}, inv_sqrt(hid));
    add(p + "mlp.down_proj.weight", {hid, inter}, inv_sqrt(inter));
    add(p + "mlp_layer_scale.scale", {hid}, 0.1f, 0.3f);
  }
  add(t + "norm.weight", {hid}, 0.1f, 1.0f);
  add(t + "output_proj.weight", {lat, hid}, inv_sqrt(hid));
  add(t + "output_proj.bias", {lat}, 0.1f);
  for (size_t i = 0; i < c.upsampling_ratios.size(); ++i) {
    const std::string p = "decoder.upsample." + std::to_string(i) + ".";
    add(p + "0.conv.weight", {lat, lat, c.upsampling_ratios[i]}, inv_sqrt(lat));
    add(p + "0.conv.bias", {lat}, 0.1f);
    add(p + "1.dwconv.conv.weight", {lat, 1, 7}, inv_sqrt(7));
    add(p + "1.dwconv.conv.bias", {lat}, 0.1f);
    add(p + "1.norm.weight", {lat}, 0.1f, 1.0f);
    add(p + "1.norm.bias", {lat}, 0.1f);
    add(p + "1.pwconv1.weight", {4 * lat, lat}, inv_sqrt(lat));
    add(p + "1.pwconv1.bias", {4 * lat}, 0.1f);
    add(p + "1.pwconv2.weight", {lat, 4 * lat}, inv_sqrt(4 * lat));
    add(p + "1.pwconv2.bias", {lat}, 0.1f);
    add(p + "1.gamma", {lat}, 0.1f, 0.3f);
  }
  add("decoder.decoder.0.conv.weight", {c.decoder_dim, lat, 7}, inv_sqrt(7 * lat));
  add("decoder.decoder.0.conv.bias", {c.decoder_dim}, 0.1f);
  const int blocks = static_cast<int>(c.upsample_rates.size());
  for (int i = 0; i < blocks; ++i) {
    const int64_t in = c.decoder_dim >> i, out = c.block_channels(i), r = c.upsample_rates[i];
    const std::string p = "decoder.decoder." + std::to_string(i + 1) + ".block.";
    add(p + "0.alpha", {in}, 0.2f);
    add(p + "0.beta", {in}, 0.2f);
    add(p + "1.conv.weight", {in, out, 2 * r}, inv_sqrt(2 * in));
    add(p + "1.conv.bias", {out}, 0.1f);
    for (int u = 0; u < 3; ++u) {
      const std::string pu = p + std::to_string(u + 2) + ".";
      add(pu + "act1.alpha", {out}, 0.2f);
      add(pu + "act1.beta", {out}, 0.2f);
      add(pu + "conv1.conv.weight", {out, out, 7}, 0.5f * inv_sqrt(7 * out));
      add(pu + "conv1.conv.bias", {out}, 0.05f);
      add(pu + "act2.alpha", {out}, 0.2f);
      add(pu + "act2.beta", {out}, 0.2f);
      add(pu + "conv2.conv.weight", {out, out, 1}, 0.5f * inv_sqrt(out));
      add(pu + "conv2.conv.bias", {out}, 0.05f);
    }
  }
  const int64_t last = c.block_channels(blocks - 1);
  add("decoder.decoder." + std::to_string(blocks + 1) + ".alpha", {last}, 0.2f);
  add("decoder.decoder." + std::to_string(blocks + 1) + ".beta", {last}, 0.2f);
  add("decoder.decoder." + std::to_string(blocks + 2) + ".conv.weight", {1, last, 7}, 0.1f * inv_sqrt(7 * last));
  add("decoder.decoder." + std::to_string(blocks + 2) + ".conv.bias", {1}, 0.02f);
  if (encoder) add_random_speech_encoder(writer, *encoder, seed + 1);
  writer.write(dir / "model.safetensors");

  const auto config_path = dir / "config.json";
  std::ofstream out(config_path);
  OrderedJson config = codec_config_json(c);
  if (encoder) {
    config["encoder_valid_num_quantizers"] = encoder->valid_quantizers;
    config["encode_downsample_rate"] = encoder->samples_per_frame();
    config["encoder_config"] = speech_encoder_config_json(*encoder);
  }
  out << config.dump(2) << "\n";
  if (!out) throw_error(ErrorCode::kInternal, "{}: cannot write", config_path.string());
}

}  // namespace omni::model::qwen3_tts
