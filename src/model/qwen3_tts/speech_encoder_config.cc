#include "model/qwen3_tts/speech_encoder_config.h"

#include <cmath>
#include <string>

#include "base/error.h"
#include "base/json.h"

namespace omni::model::qwen3_tts {

int SpeechEncoderConfig::hop() const {
  int hop = 1;
  for (int r : upsampling_ratios) hop *= r;
  return hop;
}

int SpeechEncoderConfig::downsample_stride() const {
  const double steps = static_cast<double>(sample_rate) / hop() / frame_rate;
  return static_cast<int>(std::lround(steps));
}

std::optional<SpeechEncoderConfig> read_speech_encoder_config(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "config.json";
  const Json json = read_json_file(path);
  const std::string file = path.string();
  if (!json.contains("encoder_config") || !json["encoder_config"].is_object()) return std::nullopt;
  const Json& e = json["encoder_config"];
  auto read = [&](const Json& obj, const char* prefix, const char* key, auto& value) {
    if (!obj.contains(key) || obj[key].is_null()) return;
    try {
      obj[key].get_to(value);
    } catch (const Json::exception&) {
      throw_error(ErrorCode::kLoadFailed, "{}: field '{}{}' has the wrong type (got {})", file, prefix, key,
                  obj[key].dump());
    }
  };
  SpeechEncoderConfig c;
  const char* p = "encoder_config.";
  read(json, "", "input_sample_rate", c.sample_rate);
  read(e, p, "sampling_rate", c.sample_rate);
  read(e, p, "num_filters", c.num_filters);
  read(e, p, "kernel_size", c.kernel_size);
  read(e, p, "last_kernel_size", c.last_kernel_size);
  read(e, p, "residual_kernel_size", c.residual_kernel_size);
  read(e, p, "num_residual_layers", c.num_residual_layers);
  read(e, p, "dilation_growth_rate", c.dilation_growth_rate);
  read(e, p, "compress", c.compress);
  read(e, p, "upsampling_ratios", c.upsampling_ratios);
  read(e, p, "hidden_size", c.hidden_size);
  read(e, p, "num_hidden_layers", c.num_hidden_layers);
  read(e, p, "num_attention_heads", c.num_attention_heads);
  read(e, p, "num_key_value_heads", c.num_key_value_heads);
  c.head_dim = c.hidden_size / c.num_attention_heads;
  read(e, p, "head_dim", c.head_dim);
  read(e, p, "intermediate_size", c.intermediate_size);
  read(e, p, "norm_eps", c.norm_eps);
  // Both config schemas: v4's rope_theta, v5's rope_parameters.rope_theta.
  read(e, p, "rope_theta", c.rope_theta);
  if (e.contains("rope_parameters") && e["rope_parameters"].is_object()) {
    read(e["rope_parameters"], "encoder_config.rope_parameters.", "rope_theta", c.rope_theta);
  }
  read(e, p, "sliding_window", c.sliding_window);
  read(e, p, "frame_rate", c.frame_rate);
  read(e, p, "_frame_rate", c.frame_rate);
  read(e, p, "codebook_size", c.codebook_size);
  read(e, p, "codebook_dim", c.codebook_dim);
  read(e, p, "vector_quantization_hidden_dimension", c.codebook_dim);
  read(e, p, "num_quantizers", c.num_quantizers);
  read(e, p, "num_semantic_quantizers", c.num_semantic_quantizers);
  c.valid_quantizers = c.num_quantizers;
  read(json, "", "encoder_valid_num_quantizers", c.valid_quantizers);

  auto refuse = [&](const char* key, const std::string& why) {
    throw_error(ErrorCode::kLoadFailed, "{}: field '{}' {}", file, key, why);
  };
  auto expect = [&](const char* key, auto expected) {
    if (!e.contains(key) || e[key].is_null()) return;
    if (e[key] != Json(expected))
      refuse(key, fmt::format("is {}; only {} is supported", e[key].dump(), Json(expected).dump()));
  };
  expect("audio_channels", 1);
  expect("use_causal_conv", true);
  expect("pad_mode", "constant");
  expect("use_conv_shortcut", false);
  expect("hidden_act", "gelu");
  expect("attention_bias", false);
  for (auto [key, value] : {std::pair{"encoder_config.num_filters", c.num_filters},
                            {"encoder_config.kernel_size", c.kernel_size},
                            {"encoder_config.last_kernel_size", c.last_kernel_size},
                            {"encoder_config.residual_kernel_size", c.residual_kernel_size},
                            {"encoder_config.compress", c.compress},
                            {"encoder_config.hidden_size", c.hidden_size},
                            {"encoder_config.num_attention_heads", c.num_attention_heads},
                            {"encoder_config.num_key_value_heads", c.num_key_value_heads},
                            {"encoder_config.head_dim", c.head_dim},
                            {"encoder_config.intermediate_size", c.intermediate_size},
                            {"encoder_config.sliding_window", c.sliding_window},
                            {"encoder_config.codebook_size", c.codebook_size},
                            {"encoder_config.codebook_dim", c.codebook_dim},
                            {"encoder_config.num_quantizers", c.num_quantizers},
                            {"input_sample_rate", c.sample_rate}}) {
    if (value <= 0) refuse(key, fmt::format("must be positive, got {}", value));
  }
  for (int r : c.upsampling_ratios) {
    if (r <= 0) refuse("encoder_config.upsampling_ratios", fmt::format("must be positive, got {}", r));
  }
  if (c.num_hidden_layers < 0 || c.num_residual_layers < 0) {
    refuse("encoder_config.num_hidden_layers", "and num_residual_layers must not be negative");
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0 || c.head_dim % 2 != 0) {
    refuse("encoder_config.num_attention_heads",
           fmt::format("{} is not a multiple of {} key/value heads, or head_dim {} is odd", c.num_attention_heads,
                       c.num_key_value_heads, c.head_dim));
  }
  if (c.num_semantic_quantizers < 1 || c.num_semantic_quantizers > c.num_quantizers) {
    refuse("encoder_config.num_semantic_quantizers",
           fmt::format("{} must be between 1 and num_quantizers {}", c.num_semantic_quantizers, c.num_quantizers));
  }
  if (c.valid_quantizers < c.num_semantic_quantizers || c.valid_quantizers > c.num_quantizers) {
    refuse("encoder_valid_num_quantizers",
           fmt::format("{} must be between num_semantic_quantizers {} and num_quantizers {}", c.valid_quantizers,
                       c.num_semantic_quantizers, c.num_quantizers));
  }
  const double steps = static_cast<double>(c.sample_rate) / c.hop() / c.frame_rate;
  if (!(c.frame_rate > 0) || std::abs(steps - std::round(steps)) > 1e-9 || std::lround(steps) < 1) {
    refuse("encoder_config.frame_rate", fmt::format("{} Hz is not the SEANet rate {} Hz over a whole number",
                                                    c.frame_rate, static_cast<double>(c.sample_rate) / c.hop()));
  }
  if (json.contains("encode_downsample_rate") && json["encode_downsample_rate"].is_number_integer() &&
      json["encode_downsample_rate"].get<int>() != c.samples_per_frame()) {
    refuse("encode_downsample_rate", fmt::format("is {}; the strides give {} samples per frame",
                                                 json["encode_downsample_rate"].get<int>(), c.samples_per_frame()));
  }
  return c;
}

}  // namespace omni::model::qwen3_tts
