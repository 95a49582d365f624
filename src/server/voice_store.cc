#include "server/voice_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <system_error>

#include "base/error.h"
#include "base/json.h"
#include "server/openai_error.h"

namespace omni::server {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  return out;
}

void write_file(const std::filesystem::path& path, std::string_view bytes) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw_error(ErrorCode::kUnavailable, "cannot write the uploaded voice file {}", tmp.string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    throw_error(ErrorCode::kUnavailable, "cannot write the uploaded voice file {}: {}", path.string(), ec.message());
}

Json voice_json(const UploadedVoice& v) {
  return {{"name", v.name},
          {"consent", v.consent},
          {"ref_text", v.ref_text},
          {"speaker_description", v.speaker_description},
          {"created_at", v.created_at},
          {"embedding", v.embedding},
          {"ref_code", v.ref_code},
          {"has_audio", v.has_audio}};
}

}  // namespace

void check_voice_name(std::string_view name) {
  auto allowed = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
  };
  if (name.empty() || name.size() > 64 || !std::all_of(name.begin(), name.end(), allowed) || name[0] == '.' ||
      name[0] == '_' || name[0] == '-') {
    throw_invalid_field("name",
                        "'name' must be 1 to 64 letters, digits, '_', '-' or '.', starting with a letter or digit "
                        "(got '{}')",
                        name);
  }
}

VoiceStore::VoiceStore(std::filesystem::path dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw_error(ErrorCode::kUnavailable, "cannot create the voices folder {}: {}", dir_.string(), ec.message());
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    if (entry.path().extension() != ".json") continue;
    try {
      const Json j = read_json_file(entry.path());
      UploadedVoice v;
      v.name = j.at("name").get<std::string>();
      check_voice_name(v.name);
      v.consent = j.value("consent", "");
      v.ref_text = j.value("ref_text", "");
      v.speaker_description = j.value("speaker_description", "");
      v.created_at = j.value("created_at", int64_t{0});
      v.embedding = j.at("embedding").get<std::vector<float>>();
      v.has_audio = j.value("has_audio", false);
      // Voices stored before in-context cloning by name have no codes; start-up computes them.
      if (auto codes = j.find("ref_code"); codes != j.end()) v.ref_code = codes->get<std::vector<int32_t>>();
      if (entry.path().stem() != lower(v.name)) {
        throw_error(ErrorCode::kLoadFailed, "it names voice '{}'", v.name);
      }
      voices_.emplace_back(lower(v.name), std::move(v));
    } catch (const std::exception& e) {
      spdlog::warn("voices: skipping {}: {}", entry.path().string(), e.what());
    }
  }
  std::sort(voices_.begin(), voices_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
}

std::filesystem::path VoiceStore::json_path(const std::string& key) const { return dir_ / (key + ".json"); }
std::filesystem::path VoiceStore::audio_path(const std::string& key) const { return dir_ / (key + ".audio"); }

void VoiceStore::write_voice(const std::string& key, const UploadedVoice& voice) const {
  write_file(json_path(key), voice_json(voice).dump());
}

std::optional<UploadedVoice> VoiceStore::find(std::string_view name) const {
  const std::string key = lower(name);
  std::lock_guard lock(mutex_);
  for (const auto& [k, v] : voices_) {
    if (k == key) return v;
  }
  return std::nullopt;
}

std::vector<UploadedVoice> VoiceStore::list() const {
  std::lock_guard lock(mutex_);
  std::vector<UploadedVoice> out;
  for (const auto& [k, v] : voices_) out.push_back(v);
  return out;
}

bool VoiceStore::add(const UploadedVoice& voice, const std::string* audio) {
  const std::string key = lower(voice.name);
  std::lock_guard lock(mutex_);
  auto it = std::lower_bound(voices_.begin(), voices_.end(), key,
                             [](const auto& entry, const std::string& k) { return entry.first < k; });
  if (it != voices_.end() && it->first == key) return false;
  UploadedVoice stored = voice;
  stored.has_audio = audio != nullptr;
  if (audio) write_file(audio_path(key), *audio);
  write_voice(key, stored);
  voices_.insert(it, {key, std::move(stored)});
  return true;
}

std::optional<std::string> VoiceStore::audio(std::string_view name) const {
  const std::string key = lower(name);
  std::ifstream in(audio_path(key), std::ios::binary);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void VoiceStore::update_embedding(std::string_view name, std::vector<float> embedding) {
  const std::string key = lower(name);
  std::lock_guard lock(mutex_);
  for (auto& [k, v] : voices_) {
    if (k != key) continue;
    v.embedding = std::move(embedding);
    write_voice(k, v);
  }
}

void VoiceStore::update_ref_code(std::string_view name, std::vector<int32_t> ref_code) {
  const std::string key = lower(name);
  std::lock_guard lock(mutex_);
  for (auto& [k, v] : voices_) {
    if (k != key) continue;
    v.ref_code = std::move(ref_code);
    write_voice(k, v);
  }
}

bool VoiceStore::remove(std::string_view name) {
  const std::string key = lower(name);
  std::lock_guard lock(mutex_);
  auto it = std::find_if(voices_.begin(), voices_.end(), [&](const auto& e) { return e.first == key; });
  if (it == voices_.end()) return false;
  std::error_code ec;
  std::filesystem::remove(json_path(key), ec);
  if (ec) throw_error(ErrorCode::kUnavailable, "cannot delete {}: {}", json_path(key).string(), ec.message());
  std::filesystem::remove(audio_path(key), ec);
  voices_.erase(it);
  return true;
}

}  // namespace omni::server
