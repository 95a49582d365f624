// The audio output of POST /v1/chat/completions, in OpenAI's shape as vLLM-Omni serves it:
//   - the request's `audio` object: `format` (wav default, mp3, flac, opus, aac, pcm16 or pcm: raw
//     16-bit little-endian mono samples; pcm16 is pcm) and `voice` (one of the checkpoint's
//     speakers, any case; it reaches the talker as the speaker's own spelling);
//   - the non-streamed response's audio choice `message.audio`: {id "audio-" + 16 hex digits, data
//     (base64 of the whole file), expires_at (24 h from now, unix seconds), transcript ""};
//   - each streamed audio piece as a file of its own (a WAV header per piece with wav), base64.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/json.h"
#include "media/audio_encoder.h"
#include "server/request_fields.h"

namespace omni::server {

struct ChatAudioOptions {
  media::AudioFormat format = media::AudioFormat::kWav;
  std::optional<std::string> voice;
};

// The request's `audio` field (defaults when absent); `voices`: the checkpoint's speakers (empty:
// any voice). InvalidField naming `audio`, `audio.format` (with the allowed values) or
// `audio.voice` (with the speakers) when it is malformed.
ChatAudioOptions read_chat_audio(const FieldReader& fields, const std::vector<std::string>& voices);

// `samples` (mono float32 at `sample_rate`) as one complete file in `format`.
std::string encode_audio_file(media::AudioFormat format, std::span<const float> samples, int sample_rate);

// The `audio` object of a non-streamed chat message carrying `file`.
Json chat_message_audio(const std::string& file);

}  // namespace omni::server
