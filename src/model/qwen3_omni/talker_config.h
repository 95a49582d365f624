// The Qwen3-Omni talker's configuration (config.json's talker_config; docs/models/qwen3_omni.md,
// "Speech output: the talker"), read into the Qwen3-TTS talker's configuration, whose machinery
// (model/qwen3_tts/talker.h: the stack, the codec head, the code predictor) the Omni talker runs
// on: its stack is talker_config.text_config (MoE layers with a shared expert), its code predictor
// talker_config.code_predictor_config, its text rows the thinker's (text_projection of the
// thinker's input embeddings, hidden_projection of its hidden states at multimodal positions, both
// thinker_hidden_size wide into text_config.intermediate_size), and it has no text embedding of its
// own. Errors: omni::Error(kLoadFailed) naming the file and the field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "base/json.h"
#include "model/qwen3_tts/config.h"

namespace omni::model::qwen3_omni {

struct TalkerConfig {
  qwen3_tts::TalkerConfig talker;  // the stacks, codec ids, speakers and the top-level text ids
  // The thinker layer whose output (hidden_states[accept_hidden_layer]) feeds hidden_projection.
  int accept_hidden_layer = 24;
  // Role tokens after <|im_start|> (the top level of config.json; assistant's is talker.assistant_token_id).
  int32_t system_token_id = 8948;
  int32_t user_token_id = 872;
  // Multimodal placeholders of the thinker's prompt, whose rows take the hidden projection.
  int32_t audio_token_id = 151675;
  int32_t image_token_id = 151655;
  int32_t video_token_id = 151656;
};

TalkerConfig parse_talker_config(const Json& config, const std::string& source);
TalkerConfig read_talker_config(const std::filesystem::path& dir);

}  // namespace omni::model::qwen3_omni
