// The parts of a Qwen3-TTS checkpoint's config.json and generation_config.json that the talker
// needs: the talker and code-predictor stacks, the special token ids of the text and codec
// vocabularies, the speakers and languages, and the model's sampling defaults.
//
// Names (speakers, languages) are stored lower-cased; lookups are case-insensitive, as in the
// official implementation. Errors: omni::Error(kLoadFailed) naming the file and the field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"
#include "model/hf_config.h"

namespace omni::model::qwen3_tts {

// tts_model_type: what the checkpoint was trained for (one task type per checkpoint).
enum class TtsModelType { kBase, kCustomVoice, kVoiceDesign };

std::string_view tts_model_type_name(TtsModelType type);  // "base", "custom_voice", "voice_design"

// config.json's speaker_encoder_config; absent fields take the released defaults.
struct SpeakerEncoderConfig {
  int mel_dim = 128;
  int enc_dim = 1024;
  std::vector<int> channels = {512, 512, 512, 512, 1536};
  std::vector<int> kernel_sizes = {5, 3, 3, 3, 1};
  std::vector<int> dilations = {1, 2, 3, 4, 1};
  int attention_channels = 128;
  int res2net_scale = 8;
  int se_channels = 128;
  int sample_rate = 24000;
};

struct TalkerConfig {
  TtsModelType model_type = TtsModelType::kCustomVoice;
  std::string model_size;  // tts_model_size, e.g. "0b6", "1b7"

  // Text vocabulary ids (top level of config.json).
  int32_t im_start_token_id = 151644;
  int32_t im_end_token_id = 151645;
  int32_t assistant_token_id = 77091;
  int32_t tts_pad_token_id = 151671;
  int32_t tts_bos_token_id = 151672;
  int32_t tts_eos_token_id = 151673;

  // talker_config: the stack (vocab_size = the codec vocabulary, codebook-0 codes + specials).
  TextModelConfig talker;
  // The text track: text_projection (Linear text_hidden -> projection width, SiLU, Linear -> H) of
  // the checkpoint's own text embedding (text_vocab_size rows), or, with text_vocab_size 0 (the
  // Qwen3-Omni talker), of rows the caller brings (the thinker's embeddings, text_hidden_size wide).
  int text_vocab_size = 0;
  int text_hidden_size = 0;
  int projection_size = 0;  // text_projection's inner width; 0: text_hidden_size
  // hidden_projection, of the same shapes, for rows of another kind (the Qwen3-Omni thinker's hidden
  // states at multimodal positions); the checkpoint has it or not.
  bool hidden_projection = false;
  int num_code_groups = 16;
  // talker_config.code_predictor_config (vocab_size = codes per codebook).
  TextModelConfig code_predictor;

  // Codec vocabulary ids (talker_config).
  int32_t codec_pad_id = 2148;
  int32_t codec_bos_id = 2149;
  int32_t codec_eos_id = 2150;
  int32_t codec_think_id = 2154;
  int32_t codec_nothink_id = 2155;
  int32_t codec_think_bos_id = 2156;
  int32_t codec_think_eos_id = 2157;
  std::map<std::string, int32_t> language_ids;          // lower-case language -> codec id
  std::map<std::string, int32_t> speaker_ids;           // lower-case speaker -> codec id
  std::map<std::string, std::string> speaker_dialects;  // lower-case speaker -> its dialect language

  // speaker_encoder_config.enc_dim (Base checkpoints): the x-vector width, = talker hidden.
  std::optional<int> speaker_embedding_dim;
  // speaker_encoder_config (Base checkpoints); nullopt when config.json has none. Inconsistent
  // lists (lengths, a channel count the Res2Net scale does not divide) are kLoadFailed.
  std::optional<SpeakerEncoderConfig> speaker_encoder;

  // The speaker's codec id, or nullopt when `name` (any case) is not a built-in speaker.
  std::optional<int32_t> speaker_id(std::string_view name) const;
  // The language's codec id, or nullopt for an unknown name (or "auto").
  std::optional<int32_t> language_id(std::string_view name) const;
  // Built-in speakers (lower-case), sorted by name.
  std::vector<std::string> speaker_names() const;
};

// The top-level text ids of a config.json (im_start, im_end, assistant, tts_pad, tts_bos,
// tts_eos) into `c`, where present; `source` names it in errors.
void read_text_token_ids(const Json& config, const std::string& source, TalkerConfig& c);

// Parses a Qwen3-TTS config.json; `source` names it in errors.
TalkerConfig parse_talker_config(const Json& config, const std::string& source);
TalkerConfig read_talker_config(const std::filesystem::path& dir);

// generation_config.json's sampling defaults for the talker (codebook 0) and the sub-talker
// (code predictor, codebooks 1..15). Absent fields stay unset.
struct TalkerGenerationDefaults {
  std::optional<bool> do_sample;
  std::optional<float> temperature;
  std::optional<int> top_k;
  std::optional<float> top_p;
  std::optional<float> repetition_penalty;
  std::optional<int> max_new_tokens;
  std::optional<bool> subtalker_do_sample;
  std::optional<float> subtalker_temperature;
  std::optional<int> subtalker_top_k;
  std::optional<float> subtalker_top_p;
};

// Reads `dir`/generation_config.json; a missing file gives empty defaults.
TalkerGenerationDefaults read_talker_generation_defaults(const std::filesystem::path& dir);

// ASCII lower-casing (speaker and language names are ASCII).
std::string lower_ascii(std::string_view s);

}  // namespace omni::model::qwen3_tts
