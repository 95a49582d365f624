// POST /v1/audio/speech's request body: OpenAI's fields (model, input, voice, response_format,
// speed, stream_format) and vLLM-Omni's (stream, task_type, language, instructions,
// max_new_tokens, seed, initial_codec_chunk_frames, non_streaming_mode, speaker_embedding, ref_audio,
// ref_text, x_vector_only_mode) plus
// ignore_eos (omnistage's benchmark extension: exactly max_new_tokens frames), checked and turned
// into one backend request for the pipeline's audio output.
//
// As in vLLM-Omni, a request without task_type runs as the checkpoint's task (CustomVoice when
// the checkpoint's is unknown), and a CustomVoice request without voice speaks as "Vivian" when
// the checkpoint has that speaker; otherwise `voice` is required. `speed` is applied by the
// speech route to the finished utterance (media/time_stretch.h), so streamed requests need 1.0.
//
// The talker builds its own prompt from the text, so the backend request carries no prompt
// tokens: what the stages need is in additional_information (the keys below), and the talker's
// sampling in sampling_params_list[0] — the only place max_new_tokens (as max_tokens) and seed
// travel.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"
#include "media/audio_encoder.h"
#include "runtime/serving_backend.h"

namespace omni::server {

class SpeakerEmbedder;
class VoiceStore;

// What the speech routes know of the served checkpoint (filled by the serve command).
struct SpeechOptions {
  // From the model family's description of the checkpoint (model/model_facts.h).
  std::vector<std::string> voices;    // built-in speakers; empty: voice not checked
  std::string task_type;              // the checkpoint's task; empty: unknown
  int max_instructions_length = 500;  // --tts-max-instructions-length, in characters
  // Voice cloning, when the checkpoint has a speaker encoder (Qwen3-TTS Base; wired by the serve
  // command): reference audio becomes a speaker embedding, and uploaded voices are kept. Null
  // otherwise: ref_audio and voice uploads are refused.
  std::shared_ptr<SpeakerEmbedder> embedder;
  std::shared_ptr<VoiceStore> uploaded_voices;
};

// vLLM-Omni's voice for CustomVoice requests that name none.
inline constexpr std::string_view kDefaultVoice = "Vivian";

struct SpeechRequest {
  media::AudioFormat format = media::AudioFormat::kWav;
  bool stream = false;
  bool sse = false;    // stream as server-sent events (stream_format "sse")
  double speed = 1.0;  // tempo of the finished utterance; 1.0 when streamed
  // additional_information: text, voice (as the checkpoint spells it; the default one when the
  // request names none), and when given task_type, language, instructions,
  // initial_codec_chunk_frames, non_streaming_mode, speaker_embedding.
  Json additional_information = Json::object();
  Json talker_sampling = Json::object();  // seed, max_tokens (max_new_tokens), ignore_eos
  // Base with ref_audio: the media reference whose speaker embedding the route computes
  // (SpeakerEmbedder) and puts into additional_information.speaker_embedding before the request
  // starts. An uploaded voice's embedding is put there by the parser, and when the voice clones in
  // context (its stored ref_text, or x_vector_only_mode false) its stored ref_code and the ref_text.
  std::optional<std::string> ref_audio;
  // In-context cloning (ref_audio with ref_text, x_vector_only_mode false): the route also puts the
  // reference's codec frames into additional_information.ref_code; ref_text is already there.
  bool in_context = false;
};

// Throws InvalidField (400) naming the field: `input` missing or empty; an unknown voice or
// response_format, stream_format or task_type (naming the allowed values); no voice for a
// CustomVoice request when the checkpoint has no default voice (naming its voices); a task_type
// other than the checkpoint's; VoiceDesign without instructions; instructions longer than the
// limit; speaker_embedding for a task other than Base; speed outside [0.25, 4], or other than 1
// when streamed; for Base: none or more than one of ref_audio, speaker_embedding and an uploaded
// voice, ref_audio without x_vector_only_mode and without a non-blank ref_text (in-context cloning
// needs the transcript; named: ref_text), in-context cloning on a server whose checkpoint has no
// speech-tokenizer encoder, ref_audio on a server without a speaker encoder, an unknown uploaded
// voice, x_vector_only_mode false with an uploaded voice that has no transcript (named: ref_text)
// or no reference codes (named: x_vector_only_mode), ref_text or x_vector_only_mode with neither
// ref_audio nor an uploaded voice; ref_audio, ref_text or
// x_vector_only_mode for another task; word_timestamps (not supported yet); a field of the wrong type.
SpeechRequest parse_speech_request(const Json& body, const SpeechOptions& options);

// The voice of `voices` that `name` names, ignoring ASCII case as Qwen3-TTS does; nullopt when none.
std::optional<std::string> find_voice(const std::vector<std::string>& voices, std::string_view name);

// The backend request: no prompt tokens, output modality audio, the talker's sampling for stage 0.
runtime::GenerationRequest speech_generation_request(const SpeechRequest& request, std::string request_id);

}  // namespace omni::server
