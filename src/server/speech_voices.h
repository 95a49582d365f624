// The built-in voices of a TTS checkpoint and the task they serve: the speaker names of
// config.json's talker_config.spk_id (Qwen3-TTS CustomVoice), as GET /v1/audio/voices lists them
// and as POST /v1/audio/speech checks `voice` against, and its tts_model_type, which decides
// whether a request needs a voice at all. Read once at server start.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace omni::server {

// The names as config.json spells them, sorted. Empty when the directory has no config.json or
// the config has no talker_config.spk_id (a text model, a Base or VoiceDesign checkpoint).
// Throws omni::Error(kLoadFailed) naming the file when config.json exists but is not valid JSON
// or spk_id is not an object.
std::vector<std::string> load_checkpoint_voices(const std::filesystem::path& model_dir);

// The checkpoint's task as the API names it: "CustomVoice", "VoiceDesign" or "Base" for
// config.json's tts_model_type custom_voice, voice_design or base (any case, with or without the
// underscore). Empty when the directory has no config.json or the config has no tts_model_type.
// Throws omni::Error(kLoadFailed) naming the file for invalid JSON or an unknown tts_model_type.
std::string load_checkpoint_task_type(const std::filesystem::path& model_dir);

// The voice of `voices` that `name` names, ignoring ASCII case as Qwen3-TTS does; nullopt when none.
std::optional<std::string> find_voice(const std::vector<std::string>& voices, std::string_view name);

}  // namespace omni::server
