#include "model/qwen3_tts/codec_config.h"

#include <string>

#include "base/error.h"
#include "base/json_get.h"

namespace omni::model::qwen3_tts {

int CodecDecoderConfig::samples_per_frame() const {
  int samples = 1;
  for (int r : upsampling_ratios) samples *= r;
  for (int r : upsample_rates) samples *= r;
  return samples;
}

namespace {

template <typename T>
void read_field(const Json& obj, const std::string& file, const std::string& prefix, const char* key, T& value) {
  if (!obj.contains(key) || obj[key].is_null()) return;  // the default
  try {
    value = get_exact<T>(obj[key]);
  } catch (const Json::exception&) {
    throw_error(ErrorCode::kLoadFailed, "{}: field '{}{}' has the wrong type (got {})", file, prefix, key,
                obj[key].dump());
  }
}

}  // namespace

CodecDecoderConfig parse_codec_decoder_config(const Json& d, CodecDecoderConfig c, const std::string& file,
                                              const std::string& prefix) {
  auto read = [&](const Json& obj, const std::string& p, const char* key, auto& value) {
    read_field(obj, file, p, key, value);
  };
  const std::string& p = prefix;
  read(d, p, "codebook_size", c.codebook_size);
  read(d, p, "codebook_dim", c.codebook_dim);
  read(d, p, "latent_dim", c.latent_dim);
  read(d, p, "hidden_size", c.hidden_size);
  read(d, p, "intermediate_size", c.intermediate_size);
  read(d, p, "num_hidden_layers", c.num_hidden_layers);
  read(d, p, "num_attention_heads", c.num_attention_heads);
  read(d, p, "num_key_value_heads", c.num_key_value_heads);
  read(d, p, "head_dim", c.head_dim);
  read(d, p, "sliding_window", c.sliding_window);
  read(d, p, "rope_theta", c.rope_theta);
  read(d, p, "rms_norm_eps", c.rms_norm_eps);
  read(d, p, "num_quantizers", c.num_quantizers);
  read(d, p, "upsample_rates", c.upsample_rates);
  read(d, p, "upsampling_ratios", c.upsampling_ratios);
  read(d, p, "decoder_dim", c.decoder_dim);

  auto positive = [&](const char* key, int value) {
    if (value <= 0) {
      throw_error(ErrorCode::kLoadFailed, "{}: field '{}{}' must be positive, got {}", file, p, key, value);
    }
  };
  positive("codebook_size", c.codebook_size);
  positive("latent_dim", c.latent_dim);
  positive("hidden_size", c.hidden_size);
  positive("intermediate_size", c.intermediate_size);
  positive("num_attention_heads", c.num_attention_heads);
  positive("num_key_value_heads", c.num_key_value_heads);
  positive("head_dim", c.head_dim);
  positive("sliding_window", c.sliding_window);
  positive("num_quantizers", c.num_quantizers);
  if (c.num_hidden_layers < 0) {
    throw_error(ErrorCode::kLoadFailed, "{}: field '{}num_hidden_layers' must be >= 0", file, p);
  }
  if (c.codebook_dim <= 0 || c.codebook_dim % 2 != 0) {
    throw_error(ErrorCode::kLoadFailed, "{}: field '{}codebook_dim' must be positive and even, got {}", file, p,
                c.codebook_dim);
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    throw_error(ErrorCode::kLoadFailed, "{}: {} attention heads are not a multiple of {} key/value heads", file,
                c.num_attention_heads, c.num_key_value_heads);
  }
  if (c.head_dim % 2 != 0) {
    throw_error(ErrorCode::kLoadFailed, "{}: field '{}head_dim' must be even, got {}", file, p, c.head_dim);
  }
  for (const auto* rates : {&c.upsample_rates, &c.upsampling_ratios}) {
    for (int r : *rates) {
      if (r <= 0) throw_error(ErrorCode::kLoadFailed, "{}: upsampling rates must be positive, got {}", file, r);
    }
  }
  const int blocks = static_cast<int>(c.upsample_rates.size());
  if (c.decoder_dim <= 0 || blocks >= 31 || c.decoder_dim % (1 << blocks) != 0) {
    throw_error(ErrorCode::kLoadFailed, "{}: decoder_dim {} cannot halve once per decoder block ({} blocks)", file,
                c.decoder_dim, blocks);
  }
  return c;
}

CodecDecoderConfig read_codec_decoder_config(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "config.json";
  const Json json = read_json_file(path);
  const std::string file = path.string();
  if (!json.contains("decoder_config") || !json["decoder_config"].is_object()) {
    throw_error(ErrorCode::kLoadFailed, "{}: missing object 'decoder_config'", file);
  }
  CodecDecoderConfig c =
      parse_codec_decoder_config(json["decoder_config"], CodecDecoderConfig{}, file, "decoder_config.");
  read_field(json, file, "", "output_sample_rate", c.output_sample_rate);
  if (c.output_sample_rate <= 0) {
    throw_error(ErrorCode::kLoadFailed, "{}: field 'output_sample_rate' must be positive, got {}", file,
                c.output_sample_rate);
  }
  if (json.contains("decode_upsample_rate") && json["decode_upsample_rate"].is_number_integer() &&
      json["decode_upsample_rate"].get<int>() != c.samples_per_frame()) {
    throw_error(ErrorCode::kLoadFailed,
                "{}: decode_upsample_rate {} differs from the {} samples per frame the upsampling rates give", file,
                json["decode_upsample_rate"].get<int>(), c.samples_per_frame());
  }
  return c;
}

OrderedJson codec_config_json(const CodecDecoderConfig& c) {
  OrderedJson decoder = {{"codebook_size", c.codebook_size},
                         {"codebook_dim", c.codebook_dim},
                         {"latent_dim", c.latent_dim},
                         {"hidden_size", c.hidden_size},
                         {"intermediate_size", c.intermediate_size},
                         {"num_hidden_layers", c.num_hidden_layers},
                         {"num_attention_heads", c.num_attention_heads},
                         {"num_key_value_heads", c.num_key_value_heads},
                         {"head_dim", c.head_dim},
                         {"sliding_window", c.sliding_window},
                         {"rope_theta", c.rope_theta},
                         {"max_position_embeddings", 8000},
                         {"rms_norm_eps", c.rms_norm_eps},
                         {"layer_scale_initial_scale", 0.01},
                         {"num_quantizers", c.num_quantizers},
                         {"num_semantic_quantizers", 1},
                         {"semantic_codebook_size", 4096},
                         {"upsample_rates", c.upsample_rates},
                         {"upsampling_ratios", c.upsampling_ratios},
                         {"decoder_dim", c.decoder_dim},
                         {"hidden_act", "silu"},
                         {"attention_bias", false}};
  return OrderedJson{
      {"architectures", {"Qwen3TTSTokenizerV2Model"}},    {"model_type", "qwen3_tts_tokenizer_12hz"},
      {"input_sample_rate", c.output_sample_rate},        {"output_sample_rate", c.output_sample_rate},
      {"encode_downsample_rate", c.samples_per_frame()},  {"decode_upsample_rate", c.samples_per_frame()},
      {"encoder_valid_num_quantizers", c.num_quantizers}, {"decoder_config", decoder}};
}

}  // namespace omni::model::qwen3_tts
