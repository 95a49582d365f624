#include "server/speech_request.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "base/utf8.h"
#include "media/time_stretch.h"
#include "server/openai_error.h"
#include "server/request_fields.h"
#include "server/speaker_embedder.h"
#include "server/voice_store.h"

namespace omni::server {

namespace {

constexpr std::array<std::string_view, 3> kTaskTypes = {"CustomVoice", "VoiceDesign", "Base"};
constexpr std::array<std::string_view, 2> kStreamFormats = {"sse", "audio"};

bool same_ascii_case_insensitive(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
           return lower(x) == lower(y);
         });
}

bool blank(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); });
}

void refuse_unsupported(const FieldReader& fields) {
  if (fields.boolean("word_timestamps").value_or(false)) {
    throw_invalid_field("word_timestamps", "'word_timestamps' is not supported yet");
  }
}

// An uploaded voice used by name, as vLLM-Omni resolves it: x_vector_only_mode true clones from its
// speaker embedding alone; false clones in context with the request's ref_text, else the one stored
// with the voice; left out, the voice clones in context when it was stored with a ref_text and the
// request brings none, and from its embedding alone otherwise (a request's own ref_text takes
// effect only with x_vector_only_mode false). In context, the voice's stored reference codes
// (computed from its audio at upload or start-up) go to the stages as ref_code. A voice without
// codes (uploaded as an embedding, or on a checkpoint without a speech-tokenizer encoder) clones
// from its embedding; asked explicitly to clone in context, it is a 400.
void read_uploaded_voice(const UploadedVoice& voice, const std::optional<std::string>& ref_text,
                         std::optional<bool> x_vector_only, const SpeechOptions& options, Json& info) {
  info["speaker_embedding"] = voice.embedding;
  std::string transcript;
  const bool explicit_in_context = x_vector_only == false;
  if (explicit_in_context) {
    transcript = ref_text && !blank(*ref_text) ? *ref_text : voice.ref_text;
    if (blank(transcript)) {
      throw_invalid_field("ref_text",
                          "in-context cloning with voice '{}' needs 'ref_text': the voice was uploaded without a "
                          "transcript of its audio",
                          voice.name);
    }
  } else if (!x_vector_only && !ref_text && !blank(voice.ref_text)) {
    transcript = voice.ref_text;
  }
  if (transcript.empty()) return;
  const size_t width = options.embedder ? options.embedder->encoder().codes_per_frame : 0;
  const bool has_codes = width > 0 && options.embedder->encoder().reference_codes && !voice.ref_code.empty() &&
                         voice.ref_code.size() % width == 0;
  if (!has_codes) {
    if (explicit_in_context) {
      throw_invalid_field("x_vector_only_mode",
                          "voice '{}' cannot clone in context: {}; set 'x_vector_only_mode': true or leave it out",
                          voice.name,
                          voice.has_audio ? "this checkpoint has no speech-tokenizer encoder"
                                          : "it was uploaded as a speaker embedding, without audio");
    }
    return;
  }
  info["ref_text"] = transcript;
  info["ref_code"] = voice.ref_code;
}

// Base: the speaker comes from exactly one of ref_audio (x-vector only), speaker_embedding and an
// uploaded voice.
void read_clone_fields(const FieldReader& fields, const SpeechOptions& options, const std::string& task,
                       SpeechRequest& request) {
  std::optional<std::string> ref_audio = fields.string("ref_audio");
  std::optional<std::string> ref_text = fields.string("ref_text");
  std::optional<bool> x_vector_only = fields.boolean("x_vector_only_mode");
  if (task != "Base") {
    for (const char* field : {"ref_audio", "ref_text", "x_vector_only_mode"}) {
      if (fields.has(field)) {
        throw_invalid_field(field, "'{}' is only valid for task_type Base (voice cloning), not {}", field, task);
      }
    }
    return;
  }
  Json& info = request.additional_information;
  const bool has_embedding = info.contains("speaker_embedding");
  std::optional<std::string> voice;
  if (info.contains("voice")) voice = info["voice"].get<std::string>();
  if (ref_audio) {
    if (!options.embedder) {
      throw_invalid_field("ref_audio",
                          "'ref_audio' needs a checkpoint with a speaker encoder (a Base checkpoint); "
                          "this server cannot clone voices from audio");
    }
    if (has_embedding) {
      throw_invalid_field("ref_audio", "give either 'ref_audio' or 'speaker_embedding', not both");
    }
    if (ref_audio->empty()) throw_invalid_field("ref_audio", "'ref_audio' is empty");
    // As vLLM-Omni and the official wrapper: x_vector_only_mode false (the default) clones in
    // context, which needs the transcript of the reference.
    if (!x_vector_only.value_or(false)) {
      if (!ref_text || blank(*ref_text)) {
        throw_invalid_field("ref_text",
                            "'ref_text' (the transcript of 'ref_audio') is required for in-context voice cloning; "
                            "set 'x_vector_only_mode': true to clone from the speaker embedding alone");
      }
      if (!options.embedder->encoder().reference_codes) {
        throw_invalid_field("ref_text",
                            "in-context voice cloning needs the checkpoint's speech-tokenizer encoder, which this "
                            "one lacks; set 'x_vector_only_mode': true to clone from the speaker embedding alone");
      }
      request.in_context = true;
      info["ref_text"] = *ref_text;
    }
    request.ref_audio = std::move(*ref_audio);
    info.erase("voice");
    return;
  }
  if (voice && !has_embedding) {
    std::optional<UploadedVoice> uploaded;
    if (options.uploaded_voices) uploaded = options.uploaded_voices->find(*voice);
    if (!uploaded) {
      std::vector<std::string> names;
      if (options.uploaded_voices) {
        for (const UploadedVoice& v : options.uploaded_voices->list()) names.push_back(v.name);
      }
      throw_invalid_field("voice", "unknown voice '{}'; the uploaded voices (POST /v1/audio/voices): {}", *voice,
                          names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", ")));
    }
    read_uploaded_voice(*uploaded, ref_text, x_vector_only, options, info);
    info.erase("voice");
    return;
  }
  if (x_vector_only || ref_text) {
    throw_invalid_field(x_vector_only ? "x_vector_only_mode" : "ref_text",
                        "'{}' needs 'ref_audio' or an uploaded 'voice'",
                        x_vector_only ? "x_vector_only_mode" : "ref_text");
  }
  if (!has_embedding) {
    throw_invalid_field("ref_audio",
                        "a Base (voice clone) request needs the voice: 'ref_audio' with 'x_vector_only_mode', "
                        "'speaker_embedding', or 'voice' naming an uploaded voice");
  }
  info.erase("voice");
}

}  // namespace

std::optional<std::string> find_voice(const std::vector<std::string>& voices, std::string_view name) {
  for (const std::string& voice : voices) {
    if (same_ascii_case_insensitive(voice, name)) return voice;
  }
  return std::nullopt;
}

SpeechRequest parse_speech_request(const Json& body, const SpeechOptions& options) {
  FieldReader fields(body);
  refuse_unsupported(fields);
  SpeechRequest request;
  Json& info = request.additional_information;

  std::optional<std::string> input = fields.string("input");
  if (!input) throw_invalid_field("input", "'input' is required: the text to speak");
  if (blank(*input)) throw_invalid_field("input", "'input' is empty: give the text to speak");
  info["text"] = *input;

  // The task decides which of the other fields are needed: the request's, else the checkpoint's,
  // else CustomVoice (vLLM-Omni's default).
  std::string task = options.task_type.empty() ? "CustomVoice" : options.task_type;
  if (std::optional<std::string> task_type = fields.string("task_type")) {
    auto it = std::find_if(kTaskTypes.begin(), kTaskTypes.end(),
                           [&](std::string_view known) { return same_ascii_case_insensitive(known, *task_type); });
    if (it == kTaskTypes.end()) {
      throw_invalid_field("task_type", "unknown task_type '{}'; allowed: {}", *task_type, fmt::join(kTaskTypes, ", "));
    }
    if (!options.task_type.empty() && *it != options.task_type) {
      throw_invalid_field("task_type",
                          "task_type '{}' is not served: this model is a {} checkpoint; use task_type '{}'", *task_type,
                          options.task_type, options.task_type);
    }
    task = std::string(*it);
    info["task_type"] = task;
  }

  if (std::optional<std::string> voice = fields.string("voice")) {
    if (!options.voices.empty()) {
      std::optional<std::string> known = find_voice(options.voices, *voice);
      if (!known) {
        throw_invalid_field("voice", "unknown voice '{}'; this model's voices: {}", *voice,
                            fmt::join(options.voices, ", "));
      }
      info["voice"] = *known;
    } else {
      info["voice"] = *voice;
    }
  } else if (task == "CustomVoice" && !options.voices.empty()) {
    std::optional<std::string> fallback = find_voice(options.voices, kDefaultVoice);
    if (!fallback) {
      throw_invalid_field("voice", "'voice' is required: this model has no '{}' to default to; its voices: {}",
                          kDefaultVoice, fmt::join(options.voices, ", "));
    }
    info["voice"] = *fallback;
  }

  if (std::optional<std::string> format = fields.string("response_format")) {
    std::optional<media::AudioFormat> found;
    for (media::AudioFormat candidate : media::audio_formats()) {
      if (media::audio_format_name(candidate) == *format) found = candidate;
    }
    if (!found) {
      std::vector<std::string_view> names;
      for (media::AudioFormat candidate : media::audio_formats()) names.push_back(media::audio_format_name(candidate));
      throw_invalid_field("response_format", "unknown response_format '{}'; allowed: {}", *format,
                          fmt::join(names, ", "));
    }
    request.format = *found;
  }

  request.stream = fields.boolean("stream").value_or(false);
  if (std::optional<std::string> stream_format = fields.string("stream_format")) {
    if (std::find(kStreamFormats.begin(), kStreamFormats.end(), *stream_format) == kStreamFormats.end()) {
      throw_invalid_field("stream_format", "unknown stream_format '{}'; allowed: {}", *stream_format,
                          fmt::join(kStreamFormats, ", "));
    }
    // OpenAI's stream_format "sse" streams by itself; "audio" streams only with stream: true.
    request.sse = *stream_format == "sse";
    if (request.sse) request.stream = true;
  }

  if (std::optional<double> speed = fields.number("speed", media::kMinSpeed, media::kMaxSpeed)) {
    // The whole utterance is stretched once it is complete; streamed audio leaves as it is decoded.
    if (*speed != 1.0 && request.stream) {
      throw_invalid_field("speed",
                          "'speed' {} cannot be streamed: audio is sent as it is decoded, so a streamed response "
                          "(stream or stream_format 'sse') needs speed 1.0",
                          *speed);
    }
    request.speed = *speed;
  }

  if (std::optional<std::string> language = fields.string("language")) info["language"] = *language;

  std::optional<std::string> instructions = fields.string("instructions");
  if (instructions) {
    size_t length = code_points(*instructions);
    if (length > static_cast<size_t>(options.max_instructions_length)) {
      throw_invalid_field("instructions",
                          "'instructions' is {} characters long; the limit is {} (--tts-max-instructions-length)",
                          length, options.max_instructions_length);
    }
    if (!instructions->empty()) info["instructions"] = *instructions;
  }
  if (task == "VoiceDesign" && (!instructions || blank(*instructions))) {
    throw_invalid_field("instructions", "'instructions' is required for VoiceDesign: it describes the voice");
  }

  // The talker's sampling carries max_new_tokens (as max_tokens) and seed; additional_information
  // does not repeat them.
  if (std::optional<int64_t> max_new_tokens = fields.integer("max_new_tokens", 1)) {
    request.talker_sampling["max_tokens"] = *max_new_tokens;
  }
  // Not in vLLM-Omni's speech API: vLLM's ignore_eos for the talker, so that a benchmark gets
  // exactly max_new_tokens frames from any weights.
  if (fields.boolean("ignore_eos").value_or(false)) request.talker_sampling["ignore_eos"] = true;
  if (std::optional<int64_t> seed = fields.integer("seed")) request.talker_sampling["seed"] = *seed;
  if (std::optional<int64_t> frames = fields.integer("initial_codec_chunk_frames", 1)) {
    info["initial_codec_chunk_frames"] = *frames;
  }
  // The talker's text layout (model/qwen3_tts/prompt.h), not the HTTP streaming.
  if (std::optional<bool> non_streaming_mode = fields.boolean("non_streaming_mode")) {
    info["non_streaming_mode"] = *non_streaming_mode;
  }
  if (const Json* embedding = fields.array("speaker_embedding")) {
    if (task != "Base") {
      throw_invalid_field("speaker_embedding", "'speaker_embedding' is only valid for task_type Base, not {}", task);
    }
    for (size_t i = 0; i < embedding->size(); ++i) {
      if (!(*embedding)[i].is_number()) {
        throw_invalid_field(fmt::format("speaker_embedding[{}]", i), "'speaker_embedding' must be a list of numbers");
      }
    }
    if (embedding->empty()) throw_invalid_field("speaker_embedding", "'speaker_embedding' is empty");
    info["speaker_embedding"] = *embedding;
  }
  read_clone_fields(fields, options, task, request);
  return request;
}

runtime::GenerationRequest speech_generation_request(const SpeechRequest& request, std::string request_id) {
  runtime::GenerationRequest generation;
  generation.request_id = std::move(request_id);
  generation.output_modalities = {"audio"};
  generation.stream = request.stream;
  generation.additional_information = request.additional_information;
  if (!request.talker_sampling.empty()) generation.sampling_params_list = {request.talker_sampling};
  return generation;
}

}  // namespace omni::server
