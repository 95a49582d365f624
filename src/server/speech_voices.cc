#include "server/speech_voices.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "base/json.h"

namespace omni::server {

namespace {

std::string ascii_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// config.json as an object; null when the file does not exist or holds no object.
Json read_config(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return nullptr;
  std::stringstream text;
  text << in.rdbuf();
  Json config = Json::parse(text.str(), nullptr, false);
  if (config.is_discarded()) throw_error(ErrorCode::kLoadFailed, "{}: not valid JSON", file.string());
  return config.is_object() ? config : Json(nullptr);
}

}  // namespace

std::vector<std::string> load_checkpoint_voices(const std::filesystem::path& model_dir) {
  const std::filesystem::path file = model_dir / "config.json";
  const Json config = read_config(file);
  if (config.is_null()) return {};
  auto talker = config.find("talker_config");
  if (talker == config.end() || !talker->is_object()) return {};
  auto speakers = talker->find("spk_id");
  if (speakers == talker->end() || speakers->is_null()) return {};
  if (!speakers->is_object()) {
    throw_error(ErrorCode::kLoadFailed, "{}: talker_config.spk_id must be an object of speaker name -> id, not {}",
                file.string(), speakers->type_name());
  }
  std::vector<std::string> voices;
  for (const auto& [name, id] : speakers->items()) voices.push_back(name);
  std::sort(voices.begin(), voices.end());
  return voices;
}

std::string load_checkpoint_task_type(const std::filesystem::path& model_dir) {
  const std::filesystem::path file = model_dir / "config.json";
  const Json config = read_config(file);
  if (config.is_null()) return {};
  auto type = config.find("tts_model_type");
  if (type == config.end() || type->is_null()) return {};
  std::string name = type->is_string() ? ascii_lower(type->get<std::string>()) : "";
  name.erase(std::remove(name.begin(), name.end(), '_'), name.end());
  if (name == "customvoice") return "CustomVoice";
  if (name == "voicedesign") return "VoiceDesign";
  if (name == "base") return "Base";
  throw_error(ErrorCode::kLoadFailed, "{}: tts_model_type {} is not one of custom_voice, voice_design, base",
              file.string(), type->dump());
}

std::optional<std::string> find_voice(const std::vector<std::string>& voices, std::string_view name) {
  const std::string wanted = ascii_lower(name);
  for (const std::string& voice : voices) {
    if (ascii_lower(voice) == wanted) return voice;
  }
  return std::nullopt;
}

}  // namespace omni::server
