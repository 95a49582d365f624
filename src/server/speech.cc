// POST /v1/audio/speech and GET /v1/audio/voices: OpenAI's text-to-speech API with vLLM-Omni's
// extras, in front of a pipeline whose final stage produces audio (Qwen3-TTS: talker ->
// code2wav). The backend's audio events (mono float32 PCM) are encoded as they arrive:
//   - not streamed: one response with the whole file and the format's Content-Type; with a speed
//     other than 1 the samples are kept until the utterance is complete, time-stretched as a
//     whole (media/time_stretch.h) and then encoded;
//   - stream + stream_format "audio": a chunked response whose body is the same file, sent as the
//     encoder releases it (WAV and FLAC headers then leave the length unknown);
//   - stream_format "sse": `speech.audio.delta` events whose base64 `audio` pieces concatenate to
//     that file, then one `speech.audio.done` event with the usage.
#include <spdlog/spdlog.h>

#include "base/base64.h"
#include "media/time_stretch.h"
#include "server/generation.h"
#include "server/openai_error.h"
#include "server/openai_format.h"
#include "server/request_fields.h"
#include "server/routes.h"
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

void handle_speech(const ServingContext& context, const SpeechOptions& options, HttpRequest& http,
                   const std::shared_ptr<Responder>& responder) {
  Json body = parse_request_body(http.body);
  context.resolve_model(body);
  auto speech = std::make_shared<Speech>();
  speech->responder = responder;
  speech->request = parse_speech_request(body, options);
  speech->id = random_request_id("speech-");
  std::vector<runtime::GenerationRequest> requests;
  requests.push_back(speech_generation_request(speech->request, speech->id));
  speech->run =
      GenerationRun::start(context, responder, std::move(requests),
                           {[speech](size_t, const runtime::ResponseEvent& event) { speech->on_event(event); },
                            [speech] {
                              speech->on_finished();
                              speech->run.reset();  // breaks the cycle speech -> run -> callbacks -> speech
                            }},
                           http.received_at);
}

}  // namespace

void add_speech_routes(Router& router, const ServingContext& context, const SpeechOptions& options) {
  router.add("POST", "/v1/audio/speech",
             [&context, &options](HttpRequest& request, std::shared_ptr<Responder> responder) {
               handle_speech(context, options, request, responder);
             });
  router.add("GET", "/v1/audio/voices", [&options](HttpRequest&, const std::shared_ptr<Responder>& responder) {
    Json voices = Json::array();
    for (const std::string& name : options.voices) voices.push_back({{"name", name}});
    responder->respond(json_response({{"voices", std::move(voices)}}));
  });
}

}  // namespace omni::server
