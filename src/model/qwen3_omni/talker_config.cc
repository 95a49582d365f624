#include "model/qwen3_omni/talker_config.h"

#include "base/error.h"
#include "base/json_get.h"
#include "model/hf_config.h"

namespace omni::model::qwen3_omni {
namespace {

const Json& object_at(const Json& parent, const char* key, const std::string& source) {
  const auto it = parent.find(key);
  if (it == parent.end() || !it->is_object())
    throw_error(ErrorCode::kLoadFailed, "{}: missing object '{}'", source, key);
  return *it;
}

template <typename T>
T field_or(const Json& object, const char* key, T fallback, const std::string& source) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  try {
    return get_exact<T>(*it);
  } catch (const Json::exception&) {
    throw_error(ErrorCode::kLoadFailed, "{}: field '{}' has the wrong type (got {})", source, key, it->dump());
  }
}

}  // namespace

TalkerConfig parse_talker_config(const Json& config, const std::string& source) {
  if (!config.is_object()) throw_error(ErrorCode::kLoadFailed, "{}: not a JSON object", source);
  TalkerConfig out;
  qwen3_tts::TalkerConfig& c = out.talker;
  qwen3_tts::read_text_token_ids(config, source, c);
  out.system_token_id = field_or<int32_t>(config, "system_token_id", out.system_token_id, source);
  out.user_token_id = field_or<int32_t>(config, "user_token_id", out.user_token_id, source);

  const Json& talker = object_at(config, "talker_config", source);
  const std::string ts = source + ": talker_config";
  c.talker = parse_text_model_config(object_at(talker, "text_config", ts), ts + ".text_config");
  c.code_predictor =
      parse_text_model_config(object_at(talker, "code_predictor_config", ts), ts + ".code_predictor_config");
  if (c.code_predictor.hidden_size != c.talker.hidden_size) {
    throw_error(ErrorCode::kLoadFailed,
                "{}: code_predictor_config.hidden_size {} differs from text_config.hidden_size {} (the Omni talker "
                "has no projection between them)",
                ts, c.code_predictor.hidden_size, c.talker.hidden_size);
  }
  c.text_vocab_size = 0;  // the text rows are the thinker's
  c.text_hidden_size = field_or<int>(talker, "thinker_hidden_size", 2048, ts);
  c.projection_size = c.talker.intermediate_size;
  c.hidden_projection = true;
  if (c.text_hidden_size <= 0 || c.projection_size <= 0) {
    throw_error(ErrorCode::kLoadFailed,
                "{}: thinker_hidden_size and text_config.intermediate_size must be positive (got {}, {})", ts,
                c.text_hidden_size, c.projection_size);
  }
  c.num_code_groups = field_or<int>(talker, "num_code_groups", 16, ts);
  if (c.num_code_groups < 2) {
    throw_error(ErrorCode::kLoadFailed, "{}: num_code_groups must be at least 2, got {}", ts, c.num_code_groups);
  }
  c.codec_pad_id = field_or<int32_t>(talker, "codec_pad_id", c.codec_pad_id, ts);
  c.codec_bos_id = field_or<int32_t>(talker, "codec_bos_id", c.codec_bos_id, ts);
  c.codec_eos_id = field_or<int32_t>(talker, "codec_eos_token_id", c.codec_eos_id, ts);
  c.codec_nothink_id = field_or<int32_t>(talker, "codec_nothink_id", c.codec_nothink_id, ts);
  c.codec_think_bos_id = field_or<int32_t>(talker, "codec_think_bos_id", c.codec_think_bos_id, ts);
  c.codec_think_eos_id = field_or<int32_t>(talker, "codec_think_eos_id", c.codec_think_eos_id, ts);
  for (const int32_t id : {c.codec_pad_id, c.codec_bos_id, c.codec_eos_id, c.codec_nothink_id, c.codec_think_bos_id,
                           c.codec_think_eos_id}) {
    if (id < 0 || id >= c.talker.vocab_size) {
      throw_error(ErrorCode::kLoadFailed, "{}: codec id {} is outside text_config.vocab_size {}", ts, id,
                  c.talker.vocab_size);
    }
  }
  if (const auto speakers = talker.find("speaker_id"); speakers != talker.end() && !speakers->is_null()) {
    if (!speakers->is_object()) {
      throw_error(ErrorCode::kLoadFailed, "{}: speaker_id must be an object of speaker name -> codec id", ts);
    }
    for (const auto& [name, id] : speakers->items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= c.talker.vocab_size) {
        throw_error(ErrorCode::kLoadFailed, "{}: speaker_id.{} is not a codec id below {} (got {})", ts, name,
                    c.talker.vocab_size, id.dump());
      }
      c.speaker_ids[qwen3_tts::lower_ascii(name)] = id.get<int32_t>();
    }
  }
  out.accept_hidden_layer = field_or<int>(talker, "accept_hidden_layer", out.accept_hidden_layer, ts);
  const Json& thinker = object_at(config, "thinker_config", source);
  const int thinker_layers =
      field_or<int>(object_at(thinker, "text_config", source + ": thinker_config"), "num_hidden_layers", 0, source);
  if (out.accept_hidden_layer < 0 || out.accept_hidden_layer > thinker_layers) {
    throw_error(ErrorCode::kLoadFailed, "{}: accept_hidden_layer {} is outside the thinker's 0..{} hidden states", ts,
                out.accept_hidden_layer, thinker_layers);
  }
  out.audio_token_id = field_or<int32_t>(talker, "audio_token_id", out.audio_token_id, ts);
  out.image_token_id = field_or<int32_t>(talker, "image_token_id", out.image_token_id, ts);
  out.video_token_id = field_or<int32_t>(talker, "video_token_id", out.video_token_id, ts);
  return out;
}

TalkerConfig read_talker_config(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "config.json";
  return parse_talker_config(read_json_file(file), file.string());
}

}  // namespace omni::model::qwen3_omni
