// POST /v1/audio/speech and /v1/audio/speech/batch: OpenAI's text-to-speech API with vLLM-Omni's
// extras, in front of a pipeline whose final stage produces audio (Qwen3-TTS: talker ->
// code2wav). A voice-clone request with ref_audio first gets its speaker embedding from the
// SpeakerEmbedder (off the executor) and starts when it is there. The backend's audio events (mono
// float32 PCM) are encoded as they arrive:
//   - not streamed: one response with the whole file and the format's Content-Type; with a speed
//     other than 1 the samples are kept until the utterance is complete, time-stretched as a
//     whole (media/time_stretch.h) and then encoded;
//   - stream + stream_format "audio": a chunked response whose body is the same file, sent as the
//     encoder releases it (WAV and FLAC headers then leave the length unknown);
//   - stream_format "sse": `speech.audio.delta` events whose base64 `audio` pieces concatenate to
//     that file, then one `speech.audio.done` event with the usage.
// The batch route runs its items (each the top level's fields overridden by the item's) as one
// generation and answers {id, results[{index, status, audio_data (base64), media_type, error}],
// total, succeeded, failed}: an item that fails (bad fields, bad reference audio, a stage error)
// fails alone.
#include <spdlog/spdlog.h>

#include "base/base64.h"
#include "media/time_stretch.h"
#include "server/generation.h"
#include "server/openai_error.h"
#include "server/openai_format.h"
#include "server/request_fields.h"
#include "server/routes.h"
#include "server/speaker_embedder.h"
#include "server/speech_request.h"

namespace omni::server {
namespace {

// The sample rate assumed when a request ends without any audio (Qwen3-TTS's codec rate), so
// that even an empty reply is a well-formed file.
constexpr int kDefaultSampleRate = 24000;

// The state of one response, touched only on the connection's executor.
struct Speech {
  std::shared_ptr<Responder> responder;
  std::shared_ptr<GenerationRun> run;
  std::string id;
  SpeechRequest request;
  std::unique_ptr<media::AudioEncoder> encoder;
  int sample_rate = 0;
  std::string body;                // not streamed: the file so far
  std::vector<float> unstretched;  // speed other than 1: the whole utterance, encoded at the end
  bool stream_started = false;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  std::optional<std::string> finish_reason;
  std::optional<Error> error;

  void start_encoder(int rate) {
    sample_rate = rate;
    encoder = media::make_audio_encoder(request.format, {rate, request.stream});
  }

  // Streams start with the first audio, so an error before it still gets a proper status.
  void start_stream() {
    if (stream_started) return;
    stream_started = true;
    if (request.sse) {
      responder->start_stream(200, kSseContentType, {{"Cache-Control", "no-cache"}});
    } else {
      responder->start_stream(200, std::string(media::audio_content_type(request.format)));
    }
  }

  void emit(std::string bytes) {
    if (bytes.empty()) return;
    if (!request.stream) {
      body += bytes;
      return;
    }
    start_stream();
    if (request.sse) {
      responder->write(sse_event({{"type", "speech.audio.delta"}, {"audio", base64_encode(bytes)}}));
    } else {
      responder->write(std::move(bytes));
    }
  }

  void on_event(const runtime::ResponseEvent& event) {
    prompt_tokens = event.prompt_tokens;
    completion_tokens = event.completion_tokens;
    if (event.finish_reason) finish_reason = event.finish_reason;
    if (event.error) {
      if (!error) error = event.error;
      return;
    }
    if (error || event.audio.empty()) return;
    if (!encoder) {
      start_encoder(event.audio_sample_rate);
    } else if (event.audio_sample_rate != sample_rate) {
      error = Error(ErrorCode::kInternal, fmt::format("the pipeline changed its audio sample rate from {} to {} Hz "
                                                      "within request {}",
                                                      sample_rate, event.audio_sample_rate, id));
      run->abort_all();
      return;
    }
    if (request.speed != 1.0) {
      unstretched.insert(unstretched.end(), event.audio.begin(), event.audio.end());
      return;
    }
    emit(encoder->encode(event.audio));
  }

  void on_finished() {
    if (!error && finish_reason == "abort") {
      error = Error(ErrorCode::kUnavailable, "the request was aborted before its audio was complete");
    }
    if (error) return fail(*error);
    if (!encoder) start_encoder(kDefaultSampleRate);
    if (!unstretched.empty()) emit(encoder->encode(media::time_stretch(unstretched, request.speed, sample_rate)));
    emit(encoder->finish());
    if (!request.stream) {
      HttpResponse response;
      response.content_type = std::string(media::audio_content_type(request.format));
      response.body = std::move(body);
      return responder->respond(std::move(response));
    }
    start_stream();
    if (request.sse) {
      responder->write(sse_event({{"type", "speech.audio.done"},
                                  {"usage",
                                   {{"input_tokens", prompt_tokens},
                                    {"output_tokens", completion_tokens},
                                    {"total_tokens", prompt_tokens + completion_tokens}}}}));
    }
    responder->end_stream();
  }

  void fail(const Error& failure) {
    if (!stream_started) return responder->respond(error_response(failure));
    // Raw audio has no way to carry an error: the stream ends short, and the log says why.
    spdlog::warn("speech {}: failed after streaming started: {}", id, failure.what());
    if (request.sse) responder->write(sse_event(error_json(failure)));
    responder->end_stream();
  }
};

}  // namespace

void with_speaker_embedding(const SpeechOptions& options, const std::shared_ptr<Responder>& responder,
                            SpeechRequest& request, std::function<void()> ready,
                            std::function<void(std::exception_ptr)> failed) {
  if (!request.ref_audio) return ready();
  std::string reference = std::move(*request.ref_audio);
  request.ref_audio.reset();
  Json* info = &request.additional_information;  // the caller keeps `request` alive until a callback ran
  if (request.in_context) {
    options.embedder->submit_reference_with_codes(
        std::move(reference), "ref_audio",
        [responder, info, ready = std::move(ready), failed = std::move(failed)](ReferenceVoice voice,
                                                                                std::exception_ptr error) mutable {
          responder->run(
              [info, voice = std::move(voice), error, ready = std::move(ready), failed = std::move(failed)]() mutable {
                if (error) return failed(error);
                (*info)["speaker_embedding"] = std::move(voice.embedding);
                (*info)["ref_code"] = std::move(voice.codes);
                ready();
              });
        });
    return;
  }
  options.embedder->submit_reference(std::move(reference), "ref_audio",
                                     [responder, info, ready = std::move(ready), failed = std::move(failed)](
                                         std::vector<float> embedding, std::exception_ptr error) mutable {
                                       responder->run([info, embedding = std::move(embedding), error,
                                                       ready = std::move(ready), failed = std::move(failed)]() mutable {
                                         if (error) return failed(error);
                                         (*info)["speaker_embedding"] = std::move(embedding);
                                         ready();
                                       });
                                     });
}

namespace {

// The message of a failure carried from the embedder's thread.
std::string message_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

void handle_speech(const ServingContext& context, const SpeechOptions& options, HttpRequest& http,
                   const std::shared_ptr<Responder>& responder) {
  Json body = parse_request_body(http.body);
  context.resolve_model(body);
  auto speech = std::make_shared<Speech>();
  speech->responder = responder;
  speech->request = parse_speech_request(body, options);
  speech->id = random_request_id("speech-");
  const auto received_at = http.received_at;
  auto start = [&context, speech, received_at] {
    std::vector<runtime::GenerationRequest> requests;
    requests.push_back(speech_generation_request(speech->request, speech->id));
    speech->run =
        GenerationRun::start(context, speech->responder, std::move(requests),
                             {[speech](size_t, const runtime::ResponseEvent& event) { speech->on_event(event); },
                              [speech] {
                                speech->on_finished();
                                speech->run.reset();  // breaks the cycle speech -> run -> callbacks -> speech
                              }},
                             received_at);
  };
  with_speaker_embedding(
      options, responder, speech->request,
      [speech, start] {
        try {
          start();
        } catch (const Error& e) {
          speech->responder->respond(error_response(e));
        }
      },
      [speech](std::exception_ptr error) { speech->responder->respond(error_response(error)); });
}

// One item of a batch: its request, then its file or its error.
struct BatchItem {
  SpeechRequest request;
  std::unique_ptr<media::AudioEncoder> encoder;
  int sample_rate = 0;
  std::vector<float> unstretched;
  std::string file;
  std::optional<std::string> error;
  bool submitted = false;
};

struct SpeechBatch {
  std::shared_ptr<Responder> responder;
  std::shared_ptr<GenerationRun> run;
  std::string id;
  std::vector<BatchItem> items;
  std::vector<size_t> running;  // prompt index of the run -> item index
  size_t pending_embeddings = 0;

  void on_event(size_t prompt, const runtime::ResponseEvent& event) {
    BatchItem& item = items[running[prompt]];
    if (item.error) return;
    if (event.error) {
      item.error = event.error->what();
      return;
    }
    if (event.audio.empty()) return;
    if (!item.encoder) {
      item.sample_rate = event.audio_sample_rate;
      item.encoder = media::make_audio_encoder(item.request.format, {item.sample_rate, false});
    }
    if (item.request.speed != 1.0) {
      item.unstretched.insert(item.unstretched.end(), event.audio.begin(), event.audio.end());
    } else {
      item.file += item.encoder->encode(event.audio);
    }
  }

  void respond() {
    Json results = Json::array();
    int succeeded = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      BatchItem& item = items[i];
      Json result = {{"index", i}};
      if (!item.error) {
        if (!item.encoder) item.encoder = media::make_audio_encoder(item.request.format, {kDefaultSampleRate, false});
        if (!item.unstretched.empty()) {
          item.file +=
              item.encoder->encode(media::time_stretch(item.unstretched, item.request.speed, item.sample_rate));
        }
        item.file += item.encoder->finish();
        result["status"] = "success";
        result["audio_data"] = base64_encode(item.file);
        result["media_type"] = std::string(media::audio_content_type(item.request.format));
        result["error"] = nullptr;
        ++succeeded;
      } else {
        result["status"] = "error";
        result["audio_data"] = nullptr;
        result["media_type"] = nullptr;
        result["error"] = *item.error;
      }
      results.push_back(std::move(result));
    }
    const int total = static_cast<int>(items.size());
    responder->respond(json_response({{"id", id},
                                      {"results", std::move(results)},
                                      {"total", total},
                                      {"succeeded", succeeded},
                                      {"failed", total - succeeded}}));
  }

  void start(const ServingContext& context, std::chrono::steady_clock::time_point received_at,
             const std::shared_ptr<SpeechBatch>& self) {
    std::vector<runtime::GenerationRequest> requests;
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i].error) continue;
      running.push_back(i);
      requests.push_back(speech_generation_request(items[i].request, fmt::format("{}-{}", id, i)));
    }
    if (requests.empty()) return respond();
    run = GenerationRun::start(
        context, responder, std::move(requests),
        {[self](size_t prompt, const runtime::ResponseEvent& event) { self->on_event(prompt, event); },
         [self] {
           self->respond();
           self->run.reset();
         }},
        received_at);
  }
};

// The batch's fields that are defaults of its items (vLLM-Omni's BatchSpeechRequest).
constexpr std::array<const char*, 13> kBatchDefaults = {"voice",
                                                        "instructions",
                                                        "response_format",
                                                        "speed",
                                                        "task_type",
                                                        "language",
                                                        "ref_audio",
                                                        "ref_text",
                                                        "x_vector_only_mode",
                                                        "max_new_tokens",
                                                        "initial_codec_chunk_frames",
                                                        "speaker_embedding",
                                                        "seed"};

void handle_speech_batch(const ServingContext& context, const SpeechOptions& options, HttpRequest& http,
                         const std::shared_ptr<Responder>& responder) {
  Json body = parse_request_body(http.body);
  context.resolve_model(body);
  auto it = body.find("items");
  if (it == body.end() || !it->is_array() || it->empty()) {
    throw_invalid_field("items", "'items' must be a non-empty list of speech requests");
  }
  auto batch = std::make_shared<SpeechBatch>();
  batch->responder = responder;
  batch->id = random_request_id("speech-batch-");
  batch->items.resize(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    BatchItem& item = batch->items[i];
    const Json& entry = (*it)[i];
    if (!entry.is_object()) {
      item.error = fmt::format("items[{}] must be an object", i);
      continue;
    }
    Json merged = Json::object();
    for (const char* key : kBatchDefaults) {
      if (auto value = body.find(key); value != body.end()) merged[key] = *value;
    }
    for (const auto& [key, value] : entry.items()) merged[key] = value;
    merged.erase("stream");
    merged.erase("stream_format");
    try {
      item.request = parse_speech_request(merged, options);
    } catch (const Error& e) {
      item.error = e.what();
    }
  }
  const auto received_at = http.received_at;
  for (BatchItem& item : batch->items) {
    if (!item.error && item.request.ref_audio) ++batch->pending_embeddings;
  }
  auto start = [&context, batch, received_at] {
    try {
      batch->start(context, received_at, batch);
    } catch (const Error& e) {
      batch->responder->respond(error_response(e));
    }
  };
  if (batch->pending_embeddings == 0) return start();
  for (BatchItem& item : batch->items) {
    if (item.error || !item.request.ref_audio) continue;
    BatchItem* target = &item;
    auto one_done = [batch, start] {
      if (--batch->pending_embeddings == 0) start();
    };
    with_speaker_embedding(options, responder, item.request, one_done, [target, one_done](std::exception_ptr error) {
      target->error = message_of(error);
      one_done();
    });
  }
}

}  // namespace

void add_speech_routes(Router& router, const ServingContext& context, const SpeechOptions& options) {
  router.add("POST", "/v1/audio/speech",
             [&context, &options](HttpRequest& request, std::shared_ptr<Responder> responder) {
               handle_speech(context, options, request, responder);
             });
  router.add("POST", "/v1/audio/speech/batch",
             [&context, &options](HttpRequest& request, std::shared_ptr<Responder> responder) {
               handle_speech_batch(context, options, request, responder);
             });
  add_voice_routes(router, options);
  add_speech_stream_route(router, context, options);
}

}  // namespace omni::server
