#include "model/qwen3_omni/code2wav.h"

#include "base/error.h"
#include "base/json_dump.h"
#include "base/json_get.h"
#include "model/safetensors.h"

namespace omni::model::qwen3_omni {

qwen3_tts::CodecDecoderConfig parse_code2wav_config(const Json& config, const std::string& file) {
  const auto it = config.find("code2wav_config");
  if (it == config.end() || !it->is_object()) {
    throw_error(ErrorCode::kLoadFailed, "{}: missing object 'code2wav_config'", file);
  }
  // The released values (Qwen3-Omni-30B-A3B); the fields the Qwen3-TTS decoder has and this one
  // lacks are derived: the latent is the transformer's width, head_dim its share per head.
  qwen3_tts::CodecDecoderConfig defaults;
  defaults.hidden_size = 1024;
  defaults.intermediate_size = 3072;
  Json fields = *it;
  auto number = [&](const char* key, int fallback) {
    const auto f = fields.find(key);
    if (f == fields.end() || f->is_null()) return fallback;
    try {
      if (f->is_number_integer()) return get_exact<int>(*f);
    } catch (const Json::exception&) {
    }
    throw_error(ErrorCode::kLoadFailed, "{}: field 'code2wav_config.{}' has the wrong type (got {})", file, key,
                dump_for_message(*f));
  };
  const int hidden = number("hidden_size", defaults.hidden_size);
  const int heads = number("num_attention_heads", defaults.num_attention_heads);
  if (heads <= 0 || hidden <= 0 || hidden % heads != 0) {
    throw_error(ErrorCode::kLoadFailed,
                "{}: code2wav_config.hidden_size {} is not a positive multiple of num_attention_heads {}", file, hidden,
                heads);
  }
  fields["latent_dim"] = hidden;
  if (!fields.contains("head_dim")) fields["head_dim"] = hidden / heads;
  if (const auto rope = fields.find("rope_parameters"); rope != fields.end() && rope->is_object()) {
    if (rope->contains("rope_theta")) fields["rope_theta"] = (*rope)["rope_theta"];
  }
  return qwen3_tts::parse_codec_decoder_config(fields, defaults, file, "code2wav_config.");
}

std::unique_ptr<qwen3_tts::CodecDecoder> load_code2wav(const std::filesystem::path& dir, tensor::Device device,
                                                       bool random_weights) {
  const std::filesystem::path path = dir / "config.json";
  qwen3_tts::CodecDecoderConfig config = parse_code2wav_config(read_json_file(path), path.string());
  qwen3_tts::CodecDecoderLayout layout;
  layout.name = "qwen3_omni code2wav";
  layout.prefix = "code2wav.";
  layout.residual_vq = false;
  layout.trim_transposed_left = true;
  return qwen3_tts::CodecDecoder::load(random_weights ? Checkpoint::random(dir, 0) : Checkpoint::open(dir),
                                       std::move(config), layout, device);
}

}  // namespace omni::model::qwen3_omni
