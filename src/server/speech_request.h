// POST /v1/audio/speech's request body: OpenAI's fields (model, input, voice, response_format,
// speed, stream_format) and vLLM-Omni's (stream, task_type, language, instructions,
// max_new_tokens, seed, initial_codec_chunk_frames, speaker_embedding) plus ignore_eos (omnistage's
// benchmark extension: exactly max_new_tokens frames), checked and turned into
// one backend request for the pipeline's audio output.
//
// The talker builds its own prompt from the text, so the backend request carries no prompt
// tokens: everything the stages need is in additional_information (the keys below), and the
// talker's sampling (seed, max_tokens) in sampling_params_list[0].
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/json.h"
#include "media/audio_encoder.h"
#include "runtime/serving_backend.h"

namespace omni::server {

// What the speech routes know of the served checkpoint (filled by the serve command).
struct SpeechOptions {
  std::vector<std::string> voices;    // built-in speakers (speech_voices.h); empty: voice not checked
  int max_instructions_length = 500;  // --tts-max-instructions-length, in characters
};

inline constexpr double kMinSpeed = 0.25;  // OpenAI's range of `speed`
inline constexpr double kMaxSpeed = 4.0;

struct SpeechRequest {
  media::AudioFormat format = media::AudioFormat::kWav;
  bool stream = false;
  bool sse = false;  // stream as server-sent events (stream_format "sse")
  // additional_information: text, and when given voice (as the checkpoint spells it), task_type,
  // language, instructions, max_new_tokens, seed, initial_codec_chunk_frames, speaker_embedding.
  Json additional_information = Json::object();
  Json talker_sampling = Json::object();  // seed, max_tokens, ignore_eos
};

// Throws InvalidField (400) naming the field: `input` missing or empty; an unknown voice or
// response_format, stream_format or task_type (naming the allowed values); instructions longer
// than the limit; speed outside [0.25, 4] or other than 1 (not supported: no time-stretching);
// ref_audio, ref_text, x_vector_only_mode or word_timestamps (not supported yet); a field of the
// wrong type.
SpeechRequest parse_speech_request(const Json& body, const SpeechOptions& options);

// The backend request: no prompt tokens, output modality audio, the talker's sampling for stage 0.
runtime::GenerationRequest speech_generation_request(const SpeechRequest& request, std::string request_id);

}  // namespace omni::server
