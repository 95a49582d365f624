#include "model/qwen3_tts/config.h"

#include <algorithm>

#include "base/error.h"
#include "base/json_get.h"

namespace omni::model::qwen3_tts {

namespace {

template <typename T>
std::optional<T> optional_field(const Json& object, const char* key, const std::string& source) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  try {
    return get_exact<T>(*it);
  } catch (const Json::exception&) {
    throw_error(ErrorCode::kLoadFailed, "{}: field '{}' has the wrong type (got {})", source, key, it->dump());
  }
}

template <typename T>
T field_or(const Json& object, const char* key, T fallback, const std::string& source) {
  return optional_field<T>(object, key, source).value_or(fallback);
}

// A field of talker_config, else of the top level (ports disagree on where the codec ids live).
template <typename T>
T talker_field(const Json& talker, const Json& top, const char* key, T fallback, const std::string& source) {
  if (auto v = optional_field<T>(talker, key, source + ": talker_config")) return *v;
  return field_or<T>(top, key, fallback, source);
}

const Json& object_field(const Json& object, const char* key, const std::string& source) {
  static const Json kEmpty = Json::object();
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return kEmpty;
  if (!it->is_object()) throw_error(ErrorCode::kLoadFailed, "{}: field '{}' must be an object", source, key);
  return *it;
}

std::map<std::string, int32_t> id_map(const Json& object, const std::string& source) {
  std::map<std::string, int32_t> ids;
  for (const auto& [name, id] : object.items()) {
    if (!id.is_number_integer()) throw_error(ErrorCode::kLoadFailed, "{}: '{}' is not a codec id", source, name);
    ids[lower_ascii(name)] = id.get<int32_t>();
  }
  return ids;
}

std::vector<int> int_list(const Json& object, const char* key, std::vector<int> fallback, const std::string& source) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_array()) throw_error(ErrorCode::kLoadFailed, "{}: speaker_encoder_config.{} must be a list", source, key);
  std::vector<int> out;
  for (const Json& v : *it) {
    if (!v.is_number_integer() || v.get<int>() < 1) {
      throw_error(ErrorCode::kLoadFailed, "{}: speaker_encoder_config.{} must hold positive integers", source, key);
    }
    out.push_back(v.get<int>());
  }
  return out;
}

int int_field(const Json& object, const char* key, int fallback, const std::string& source) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<int>() < 1) {
    throw_error(ErrorCode::kLoadFailed, "{}: speaker_encoder_config.{} must be a positive integer", source, key);
  }
  return it->get<int>();
}

SpeakerEncoderConfig parse_speaker_encoder_config(const Json& object, const std::string& source) {
  SpeakerEncoderConfig c;
  c.mel_dim = int_field(object, "mel_dim", c.mel_dim, source);
  c.enc_dim = int_field(object, "enc_dim", c.enc_dim, source);
  c.channels = int_list(object, "enc_channels", c.channels, source);
  c.kernel_sizes = int_list(object, "enc_kernel_sizes", c.kernel_sizes, source);
  c.dilations = int_list(object, "enc_dilations", c.dilations, source);
  c.attention_channels = int_field(object, "enc_attention_channels", c.attention_channels, source);
  c.res2net_scale = int_field(object, "enc_res2net_scale", c.res2net_scale, source);
  c.se_channels = int_field(object, "enc_se_channels", c.se_channels, source);
  c.sample_rate = int_field(object, "sample_rate", c.sample_rate, source);
  if (c.channels.size() < 3 || c.kernel_sizes.size() != c.channels.size() || c.dilations.size() != c.channels.size()) {
    throw_error(ErrorCode::kLoadFailed,
                "{}: speaker_encoder_config needs enc_channels, enc_kernel_sizes and enc_dilations of one length >= 3 "
                "(got {}, {}, {})",
                source, c.channels.size(), c.kernel_sizes.size(), c.dilations.size());
  }
  for (size_t i = 1; i + 1 < c.channels.size(); ++i) {
    if (c.channels[i] % c.res2net_scale != 0) {
      throw_error(ErrorCode::kLoadFailed,
                  "{}: speaker_encoder_config.enc_channels[{}] = {} is not a multiple of "
                  "enc_res2net_scale {}",
                  source, i, c.channels[i], c.res2net_scale);
    }
  }
  return c;
}

}  // namespace

std::string_view tts_model_type_name(TtsModelType type) {
  switch (type) {
    case TtsModelType::kBase:
      return "base";
    case TtsModelType::kCustomVoice:
      return "custom_voice";
    case TtsModelType::kVoiceDesign:
      return "voice_design";
  }
  return "?";
}

std::string lower_ascii(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c); });
  return out;
}

std::optional<int32_t> TalkerConfig::speaker_id(std::string_view name) const {
  auto it = speaker_ids.find(lower_ascii(name));
  if (it == speaker_ids.end()) return std::nullopt;
  return it->second;
}

std::optional<int32_t> TalkerConfig::language_id(std::string_view name) const {
  auto it = language_ids.find(lower_ascii(name));
  if (it == language_ids.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> TalkerConfig::speaker_names() const {
  std::vector<std::string> names;
  for (const auto& [name, id] : speaker_ids) names.push_back(name);
  return names;
}

void read_text_token_ids(const Json& config, const std::string& source, TalkerConfig& c) {
  c.im_start_token_id = field_or<int32_t>(config, "im_start_token_id", c.im_start_token_id, source);
  c.im_end_token_id = field_or<int32_t>(config, "im_end_token_id", c.im_end_token_id, source);
  c.assistant_token_id = field_or<int32_t>(config, "assistant_token_id", c.assistant_token_id, source);
  c.tts_pad_token_id = field_or<int32_t>(config, "tts_pad_token_id", c.tts_pad_token_id, source);
  c.tts_bos_token_id = field_or<int32_t>(config, "tts_bos_token_id", c.tts_bos_token_id, source);
  c.tts_eos_token_id = field_or<int32_t>(config, "tts_eos_token_id", c.tts_eos_token_id, source);
}

TalkerConfig parse_talker_config(const Json& config, const std::string& source) {
  if (!config.is_object()) throw_error(ErrorCode::kLoadFailed, "{}: not a JSON object", source);
  TalkerConfig c;
  const std::string type = field_or<std::string>(config, "tts_model_type", "custom_voice", source);
  if (type == "base") {
    c.model_type = TtsModelType::kBase;
  } else if (type == "custom_voice") {
    c.model_type = TtsModelType::kCustomVoice;
  } else if (type == "voice_design") {
    c.model_type = TtsModelType::kVoiceDesign;
  } else {
    throw_error(ErrorCode::kLoadFailed, "{}: tts_model_type '{}' is not one of base, custom_voice, voice_design",
                source, type);
  }
  c.model_size = field_or<std::string>(config, "tts_model_size", "", source);
  read_text_token_ids(config, source, c);

  auto talker_it = config.find("talker_config");
  if (talker_it == config.end() || !talker_it->is_object()) {
    throw_error(ErrorCode::kLoadFailed, "{}: missing object 'talker_config'", source);
  }
  const Json& talker = *talker_it;
  const std::string talker_source = source + ": talker_config";
  c.talker = parse_text_model_config(talker, talker_source);
  c.text_vocab_size = field_or<int>(talker, "text_vocab_size", 0, talker_source);
  c.text_hidden_size = field_or<int>(talker, "text_hidden_size", 0, talker_source);
  if (c.text_vocab_size <= 0 || c.text_hidden_size <= 0) {
    throw_error(ErrorCode::kLoadFailed, "{}: text_vocab_size and text_hidden_size must be positive (got {}, {})",
                talker_source, c.text_vocab_size, c.text_hidden_size);
  }
  c.num_code_groups = field_or<int>(talker, "num_code_groups", c.num_code_groups, talker_source);
  if (c.num_code_groups < 2) {
    throw_error(ErrorCode::kLoadFailed, "{}: num_code_groups must be at least 2, got {}", talker_source,
                c.num_code_groups);
  }
  auto cp_it = talker.find("code_predictor_config");
  if (cp_it == talker.end() || !cp_it->is_object()) {
    throw_error(ErrorCode::kLoadFailed, "{}: missing object 'code_predictor_config'", talker_source);
  }
  c.code_predictor = parse_text_model_config(*cp_it, talker_source + ".code_predictor_config");

  c.codec_pad_id = talker_field<int32_t>(talker, config, "codec_pad_id", c.codec_pad_id, source);
  c.codec_bos_id = talker_field<int32_t>(talker, config, "codec_bos_id", c.codec_bos_id, source);
  c.codec_eos_id = talker_field<int32_t>(talker, config, "codec_eos_token_id", c.codec_eos_id, source);
  c.codec_think_id = talker_field<int32_t>(talker, config, "codec_think_id", c.codec_think_id, source);
  c.codec_nothink_id = talker_field<int32_t>(talker, config, "codec_nothink_id", c.codec_nothink_id, source);
  c.codec_think_bos_id = talker_field<int32_t>(talker, config, "codec_think_bos_id", c.codec_think_bos_id, source);
  c.codec_think_eos_id = talker_field<int32_t>(talker, config, "codec_think_eos_id", c.codec_think_eos_id, source);
  for (int32_t id : {c.codec_pad_id, c.codec_bos_id, c.codec_eos_id, c.codec_think_id, c.codec_nothink_id,
                     c.codec_think_bos_id, c.codec_think_eos_id}) {
    if (id < 0 || id >= c.talker.vocab_size) {
      throw_error(ErrorCode::kLoadFailed, "{}: codec id {} is outside the codec vocabulary of {}", talker_source, id,
                  c.talker.vocab_size);
    }
  }

  const Json& languages = talker.contains("codec_language_id")
                              ? object_field(talker, "codec_language_id", talker_source)
                              : object_field(config, "codec_language_id", source);
  c.language_ids = id_map(languages, source + ": codec_language_id");
  const Json& speakers = talker.contains("spk_id") ? object_field(talker, "spk_id", talker_source)
                                                   : object_field(config, "spk_id", source);
  c.speaker_ids = id_map(speakers, source + ": spk_id");
  const Json& dialects = talker.contains("spk_is_dialect") ? object_field(talker, "spk_is_dialect", talker_source)
                                                           : object_field(config, "spk_is_dialect", source);
  for (const auto& [name, dialect] : dialects.items()) {
    // false (or null) = a speaker of the standard language; a string names its dialect.
    if (dialect.is_string()) {
      const std::string language = lower_ascii(dialect.get<std::string>());
      if (!c.language_ids.count(language)) {
        throw_error(ErrorCode::kLoadFailed, "{}: spk_is_dialect.{} names '{}', which codec_language_id lacks", source,
                    name, language);
      }
      c.speaker_dialects[lower_ascii(name)] = language;
    } else if (!dialect.is_boolean() && !dialect.is_null()) {
      throw_error(ErrorCode::kLoadFailed, "{}: spk_is_dialect.{} must be false or a language name", source, name);
    }
  }
  for (const auto* ids : {&c.language_ids, &c.speaker_ids}) {
    for (const auto& [name, id] : *ids) {
      if (id < 0 || id >= c.talker.vocab_size) {
        throw_error(ErrorCode::kLoadFailed, "{}: '{}' has codec id {}, outside the codec vocabulary of {}", source,
                    name, id, c.talker.vocab_size);
      }
    }
  }

  const Json& encoder = object_field(config, "speaker_encoder_config", source);
  if (auto dim = optional_field<int>(encoder, "enc_dim", source + ": speaker_encoder_config")) {
    c.speaker_embedding_dim = *dim;
    c.speaker_encoder = parse_speaker_encoder_config(encoder, source);
  } else if (c.model_type == TtsModelType::kBase) {
    c.speaker_embedding_dim = c.talker.hidden_size;
  }
  return c;
}

TalkerConfig read_talker_config(const std::filesystem::path& dir) {
  const auto path = dir / "config.json";
  return parse_talker_config(read_json_file(path), path.string());
}

TalkerGenerationDefaults read_talker_generation_defaults(const std::filesystem::path& dir) {
  const auto path = dir / "generation_config.json";
  TalkerGenerationDefaults d;
  if (!std::filesystem::exists(path)) return d;
  const Json json = read_json_file(path);
  const std::string source = path.string();
  d.do_sample = optional_field<bool>(json, "do_sample", source);
  d.temperature = optional_field<float>(json, "temperature", source);
  d.top_k = optional_field<int>(json, "top_k", source);
  d.top_p = optional_field<float>(json, "top_p", source);
  d.repetition_penalty = optional_field<float>(json, "repetition_penalty", source);
  d.max_new_tokens = optional_field<int>(json, "max_new_tokens", source);
  d.subtalker_do_sample = optional_field<bool>(json, "subtalker_dosample", source);
  d.subtalker_temperature = optional_field<float>(json, "subtalker_temperature", source);
  d.subtalker_top_k = optional_field<int>(json, "subtalker_top_k", source);
  d.subtalker_top_p = optional_field<float>(json, "subtalker_top_p", source);
  return d;
}

}  // namespace omni::model::qwen3_tts
