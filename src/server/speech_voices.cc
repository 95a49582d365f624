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

}  // namespace

std::vector<std::string> load_checkpoint_voices(const std::filesystem::path& model_dir) {
  const std::filesystem::path file = model_dir / "config.json";
  std::ifstream in(file);
  if (!in) return {};
  std::stringstream text;
  text << in.rdbuf();
  Json config = Json::parse(text.str(), nullptr, false);
  if (config.is_discarded()) throw_error(ErrorCode::kLoadFailed, "{}: not valid JSON", file.string());
  if (!config.is_object()) return {};
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

std::optional<std::string> find_voice(const std::vector<std::string>& voices, std::string_view name) {
  const std::string wanted = ascii_lower(name);
  for (const std::string& voice : voices) {
    if (ascii_lower(voice) == wanted) return voice;
  }
  return std::nullopt;
}

}  // namespace omni::server
