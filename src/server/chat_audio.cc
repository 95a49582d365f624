#include "server/chat_audio.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <string_view>
#include <utility>
#include <vector>

#include "base/base64.h"
#include "server/openai_error.h"
#include "server/openai_format.h"
#include "server/serving_context.h"
#include "server/speech_request.h"

namespace omni::server {
namespace {

// OpenAI's chat audio formats and vLLM-Omni's pcm, by the name a request gives.
constexpr std::array<std::pair<std::string_view, media::AudioFormat>, 7> kChatAudioFormats = {{
    {"wav", media::AudioFormat::kWav},
    {"mp3", media::AudioFormat::kMp3},
    {"flac", media::AudioFormat::kFlac},
    {"opus", media::AudioFormat::kOpus},
    {"aac", media::AudioFormat::kAac},
    {"pcm16", media::AudioFormat::kPcm},
    {"pcm", media::AudioFormat::kPcm},
}};

constexpr int64_t kAudioLifetimeSeconds = int64_t{24} * 60 * 60;

}  // namespace

ChatAudioOptions read_chat_audio(const FieldReader& fields, const std::vector<std::string>& voices) {
  ChatAudioOptions options;
  const Json* audio = fields.object("audio");
  if (audio == nullptr) return options;
  FieldReader audio_fields(*audio, "audio.");
  if (std::optional<std::string> format = audio_fields.string("format")) {
    auto it = std::find_if(kChatAudioFormats.begin(), kChatAudioFormats.end(),
                           [&](const auto& entry) { return entry.first == *format; });
    if (it == kChatAudioFormats.end()) {
      std::vector<std::string_view> names;
      names.reserve(kChatAudioFormats.size());
      for (const auto& entry : kChatAudioFormats) names.push_back(entry.first);
      throw_invalid_field("audio.format", "'audio.format' must be one of {}, got '{}'", fmt::join(names, ", "),
                          *format);
    }
    options.format = it->second;
  }
  options.voice = audio_fields.string("voice");
  if (options.voice && options.voice->empty()) throw_invalid_field("audio.voice", "'audio.voice' is empty");
  if (options.voice && !voices.empty()) {
    std::optional<std::string> known = find_voice(voices, *options.voice);
    if (!known) {
      throw_invalid_field("audio.voice", "unknown voice '{}'; this model's voices: {}", *options.voice,
                          fmt::join(voices, ", "));
    }
    options.voice = known;
  }
  return options;
}

std::string encode_audio_file(media::AudioFormat format, std::span<const float> samples, int sample_rate) {
  std::unique_ptr<media::AudioEncoder> encoder = media::make_audio_encoder(format, {sample_rate, false});
  std::string file = encoder->encode(samples);
  file += encoder->finish();
  return file;
}

Json chat_message_audio(const std::string& file) {
  return {{"id", random_request_id("audio-").substr(0, 6 + 16)},
          {"data", base64_encode(file)},
          {"expires_at", unix_seconds() + kAudioLifetimeSeconds},
          {"transcript", ""}};
}

}  // namespace omni::server
