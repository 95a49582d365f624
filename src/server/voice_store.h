// Voices uploaded through POST /v1/audio/voices, kept in a folder so that they survive a restart
// (serve --voices-dir; by default under the model's folder): per voice `<name>.json` (its name,
// consent, ref_text, speaker_description, creation time, speaker embedding and, for in-context
// cloning, the reference codec frames of its audio) and, when it was uploaded as audio,
// `<name>.audio` (the file as sent). Files are written to a temporary name and
// renamed, so a crash never leaves half a voice. Names are matched ignoring ASCII case, like the
// built-in speakers.
//
// Threads: every method from any thread (one mutex). Errors: omni::Error(kUnavailable) naming the
// file when the folder cannot be written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace omni::server {

struct UploadedVoice {
  std::string name;
  std::string consent;
  std::string ref_text;
  std::string speaker_description;
  int64_t created_at = 0;  // Unix seconds
  std::vector<float> embedding;
  // The speech-tokenizer encoder's codec frames of the uploaded audio (frame-major), which
  // in-context cloning by name sends as the request's ref_code; empty for a voice uploaded as an
  // embedding or on a checkpoint without that encoder.
  std::vector<int32_t> ref_code;
  bool has_audio = false;
};

// Throws InvalidField("name") unless `name` is 1..64 characters of letters, digits, '_', '-' and
// '.', starting with a letter or digit.
void check_voice_name(std::string_view name);

class VoiceStore {
 public:
  // Creates `dir` when missing and reads the voices in it; a file that does not parse is logged and
  // skipped.
  explicit VoiceStore(std::filesystem::path dir);

  const std::filesystem::path& dir() const { return dir_; }
  std::optional<UploadedVoice> find(std::string_view name) const;
  std::vector<UploadedVoice> list() const;  // by name
  // Stores `voice` (and `audio`, the uploaded file, when given), replacing none: false when a voice
  // of that name exists.
  bool add(const UploadedVoice& voice, const std::string* audio);
  // The stored audio of `name`, or nullopt.
  std::optional<std::string> audio(std::string_view name) const;
  // Replaces the embedding of an existing voice (re-encoded at start-up for another model).
  void update_embedding(std::string_view name, std::vector<float> embedding);
  // Replaces the reference codes of an existing voice (computed again at start-up).
  void update_ref_code(std::string_view name, std::vector<int32_t> ref_code);
  // false when there is no such voice.
  bool remove(std::string_view name);

 private:
  std::filesystem::path json_path(const std::string& key) const;
  std::filesystem::path audio_path(const std::string& key) const;
  void write_voice(const std::string& key, const UploadedVoice& voice) const;

  const std::filesystem::path dir_;
  mutable std::mutex mutex_;
  std::vector<std::pair<std::string, UploadedVoice>> voices_;  // lower-case name -> voice, sorted
};

}  // namespace omni::server
