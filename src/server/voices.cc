// GET /v1/audio/voices, POST /v1/audio/voices and DELETE /v1/audio/voices/{name}: the built-in
// speakers of the checkpoint and the voices clients upload for cloning (server/voice_store.h), as
// vLLM-Omni serves them:
//   GET    -> {"voices": [every name, built-in then uploaded], "uploaded_voices": [{name, consent,
//             ref_text, speaker_description, embedding_source, embedding_dim, created_at}]}
//   POST   multipart/form-data: name, consent, and audio_sample (an audio file, encoded by the
//          speaker encoder and, where the checkpoint has one, the speech-tokenizer encoder for
//          in-context cloning by name) xor speaker_embedding (a JSON list of floats); optional
//          ref_text, speaker_description -> {"success": true, "voice": {…}}
//   DELETE -> {"success": true, "name": …}; built-in voices cannot be deleted (400), unknown ones 404.
// Uploads and deletions exist only where the checkpoint can clone (SpeechOptions::embedder).
#include <chrono>

#include "base/json.h"
#include "server/multipart_form.h"
#include "server/openai_error.h"
#include "server/openai_format.h"
#include "server/routes.h"
#include "server/speaker_embedder.h"
#include "server/speech_request.h"
#include "server/voice_store.h"
#include "text/tokenizer/utf8.h"

namespace omni::server {

namespace {

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
           return lower(x) == lower(y);
         });
}

Json voice_entry(const UploadedVoice& v) {
  return {{"name", v.name},
          {"consent", v.consent},
          {"ref_text", v.ref_text},
          {"speaker_description", v.speaker_description},
          {"embedding_source", v.has_audio ? "audio" : "embedding"},
          {"embedding_dim", v.embedding.size()},
          {"created_at", v.created_at}};
}

void list_voices(const SpeechOptions& options, const std::shared_ptr<Responder>& responder) {
  Json names = Json::array();
  for (const std::string& name : options.voices) names.push_back(name);
  Json uploaded = Json::array();
  if (options.uploaded_voices) {
    for (const UploadedVoice& v : options.uploaded_voices->list()) {
      names.push_back(v.name);
      uploaded.push_back(voice_entry(v));
    }
  }
  responder->respond(json_response({{"voices", std::move(names)}, {"uploaded_voices", std::move(uploaded)}}));
}

std::vector<float> embedding_field(const std::string& text, size_t size) {
  Json parsed;
  try {
    parsed = Json::parse(text);
  } catch (const Json::exception&) {
    throw_invalid_field("speaker_embedding", "'speaker_embedding' must be a JSON list of numbers");
  }
  if (!parsed.is_array() || !std::all_of(parsed.begin(), parsed.end(), [](const Json& v) { return v.is_number(); })) {
    throw_invalid_field("speaker_embedding", "'speaker_embedding' must be a JSON list of numbers");
  }
  if (parsed.size() != size) {
    throw_invalid_field("speaker_embedding", "'speaker_embedding' has {} values; this model's speaker embedding has {}",
                        parsed.size(), size);
  }
  return parsed.get<std::vector<float>>();
}

// A text field's bytes, which must be UTF-8: the voice's JSON file and every answer that lists it
// hold them (before this check, an upload whose ref_text held invalid UTF-8 threw from the JSON
// writer on the embedder's thread and took the server down; found by the voices_route fuzzer).
std::string text_value(const FormPart& part) {
  if (std::optional<size_t> bad = text::utf8::find_invalid(part.data)) {
    throw_invalid_field(part.name, "'{}' is not valid UTF-8 (at byte {})", part.name, *bad);
  }
  return part.data;
}

void upload_voice(const SpeechOptions& options, HttpRequest& http, const std::shared_ptr<Responder>& responder) {
  std::optional<std::string> boundary;
  try {
    boundary = multipart_boundary(http.header("content-type"));
  } catch (const Error& e) {
    throw_invalid_field("audio_sample", "{}", e.what());
  }
  if (!boundary) {
    throw_invalid_field("audio_sample", "POST /v1/audio/voices takes multipart/form-data (got Content-Type '{}')",
                        http.header("content-type"));
  }
  std::vector<FormPart> parts;
  try {
    parts = parse_multipart_form(http.body, *boundary);
  } catch (const Error& e) {
    throw_invalid_field("audio_sample", "the multipart body is malformed: {}", e.what());
  }
  auto field = [&parts](std::string_view name) -> const FormPart* {
    for (const FormPart& part : parts) {
      if (part.name == name) return &part;
    }
    return nullptr;
  };
  const FormPart* name = field("name");
  if (!name || name->data.empty()) throw_invalid_field("name", "'name' is required: the voice's name");
  check_voice_name(name->data);
  for (const std::string& builtin : options.voices) {
    if (same_name(builtin, name->data)) {
      throw_invalid_field("name", "'{}' is a built-in voice of this model; choose another name", name->data);
    }
  }
  const FormPart* consent = field("consent");
  if (!consent || consent->data.empty()) {
    throw_invalid_field("consent", "'consent' is required: confirm that the speaker agreed to be cloned");
  }
  const FormPart* audio = field("audio_sample");
  const FormPart* embedding = field("speaker_embedding");
  if ((audio != nullptr) == (embedding != nullptr)) {
    throw_invalid_field("audio_sample", "give exactly one of 'audio_sample' (an audio file) and 'speaker_embedding'");
  }
  if (options.uploaded_voices->find(name->data)) {
    throw_invalid_field("name", "an uploaded voice '{}' exists; delete it first (DELETE /v1/audio/voices/{})",
                        name->data, name->data);
  }
  UploadedVoice voice;
  voice.name = name->data;
  voice.consent = text_value(*consent);
  if (const FormPart* ref_text = field("ref_text")) voice.ref_text = text_value(*ref_text);
  if (const FormPart* description = field("speaker_description")) voice.speaker_description = text_value(*description);
  voice.created_at =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto store = [store = options.uploaded_voices, responder](UploadedVoice voice, const std::string* audio) {
    if (!store->add(voice, audio)) {
      return responder->respond(
          error_response(InvalidField("name", fmt::format("an uploaded voice '{}' exists", voice.name))));
    }
    voice.has_audio = audio != nullptr;
    responder->respond(json_response({{"success", true}, {"voice", voice_entry(voice)}}));
  };
  if (embedding) {
    voice.embedding = embedding_field(embedding->data, options.embedder->encoder().embedding_size);
    return store(std::move(voice), nullptr);
  }
  auto bytes = std::make_shared<std::string>(audio->data);
  auto finish = [responder, bytes, store](UploadedVoice voice, std::exception_ptr error) {
    if (error) return responder->respond(error_response(error));
    // Nothing may escape onto the embedder's thread: it would end the process.
    try {
      store(std::move(voice), bytes.get());
    } catch (...) {
      responder->respond(error_response(std::current_exception()));
    }
  };
  if (options.embedder->encoder().reference_codes) {
    // The reference codes too, so that using the voice by name clones in context without running
    // the speech-tokenizer encoder again (vLLM-Omni caches them per voice the same way).
    options.embedder->submit_bytes_with_codes(
        *bytes, "audio_sample",
        [responder, voice = std::move(voice), finish](ReferenceVoice reference, std::exception_ptr error) mutable {
          responder->run([voice = std::move(voice), finish, reference = std::move(reference), error]() mutable {
            voice.embedding = std::move(reference.embedding);
            voice.ref_code = std::move(reference.codes);
            finish(std::move(voice), error);
          });
        });
    return;
  }
  options.embedder->submit_bytes(
      *bytes, "audio_sample",
      [responder, voice = std::move(voice), finish](std::vector<float> embedding, std::exception_ptr error) mutable {
        responder->run([voice = std::move(voice), finish, embedding = std::move(embedding), error]() mutable {
          voice.embedding = std::move(embedding);
          finish(std::move(voice), error);
        });
      });
}

void delete_voice(const SpeechOptions& options, HttpRequest& http, const std::shared_ptr<Responder>& responder) {
  const std::string name = http.path.substr(http.path.rfind('/') + 1);
  for (const std::string& builtin : options.voices) {
    if (same_name(builtin, name)) {
      throw_invalid_field("name", "'{}' is a built-in voice of this model and cannot be deleted", name);
    }
  }
  if (!options.uploaded_voices->remove(name)) {
    throw Error(ErrorCode::kNotFound, fmt::format("no uploaded voice '{}'", name));
  }
  responder->respond(json_response({{"success", true}, {"name", name}}));
}

}  // namespace

void add_voice_routes(Router& router, const SpeechOptions& options) {
  router.add("GET", "/v1/audio/voices", [&options](HttpRequest&, const std::shared_ptr<Responder>& responder) {
    list_voices(options, responder);
  });
  if (!options.embedder || !options.uploaded_voices) return;
  router.add("POST", "/v1/audio/voices", [&options](HttpRequest& http, const std::shared_ptr<Responder>& responder) {
    upload_voice(options, http, responder);
  });
  router.add("DELETE", std::string("/v1/audio/voices/") + std::string(Router::kPathParameter),
             [&options](HttpRequest& http, const std::shared_ptr<Responder>& responder) {
               delete_voice(options, http, responder);
             });
}

}  // namespace omni::server
