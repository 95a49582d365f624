// WebSocket /v1/audio/speech/stream: text arrives in pieces, speech leaves sentence by sentence,
// as vLLM-Omni's streaming speech session does.
//   client -> server (JSON text messages):
//     {"type": "session.config", "session": {…}}  first; the fields of POST /v1/audio/speech
//         without input (also accepted at the message's top level), plus stream_audio (true: PCM
//         pieces as they are decoded; needs response_format pcm and speed 1) and split_granularity
//         ("sentence": split after . ! ? and their CJK forms; "clause": also , ; and theirs)
//     {"type": "input.text", "text": "…"}   any number
//     {"type": "input.done"}                the rest of the text is the last sentence
//   server -> client:
//     {"type": "session.configured"}; per sentence {"type": "audio.start", "sentence_index",
//     "sentence_text", "format"}, binary frames (the sentence's file, or its PCM pieces with
//     stream_audio), {"type": "audio.done", "sentence_index", "total_bytes", "error"}; finally
//     {"type": "session.done", "total_sentences"} and a normal close.
//   Errors are {"type": "error", "message", "param"} frames: a missing or bad session.config
//   closes the session after its error; malformed JSON, an unknown type or a binary message do not.
// Sentences are spoken one at a time, in order. A client that disconnects aborts the sentence
// being generated and drops the rest.
#include <fmt/format.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "base/json.h"
#include "media/audio_encoder.h"
#include "media/time_stretch.h"
#include "server/generation.h"
#include "server/openai_error.h"
#include "server/routes.h"
#include "server/speaker_embedder.h"
#include "server/speech_request.h"

namespace omni::server {

namespace {

constexpr int kDefaultSampleRate = 24000;

// GenerationRun talks to a Responder: this one runs its tasks on the socket's executor and tells it
// when the socket has closed. The response methods are unused (the session writes frames itself).
class SocketResponder final : public Responder {
 public:
  explicit SocketResponder(std::shared_ptr<WebSocket> socket) : socket_(std::move(socket)) {}
  void respond(HttpResponse) override {}
  void start_stream(int, std::string, HttpHeaders) override {}
  void write(std::string) override {}
  void end_stream() override {}
  void run(std::function<void()> task) override { socket_->run(std::move(task)); }
  // Called on the socket's executor, like closed().
  void on_disconnect(std::function<void()> callback) override {
    if (closed_) return callback();
    callbacks_.push_back(std::move(callback));
  }
  void closed() {
    closed_ = true;
    auto callbacks = std::move(callbacks_);
    for (auto& callback : callbacks) callback();
  }

 private:
  std::shared_ptr<WebSocket> socket_;
  std::vector<std::function<void()>> callbacks_;
  bool closed_ = false;
};

// The length of the first complete sentence of `text` (0: none yet). A terminator ends a sentence
// when whitespace follows it (so "3.5" does not), a CJK one at once.
size_t sentence_end(std::string_view text, bool clauses, bool at_end) {
  for (size_t i = 0; i < text.size(); ++i) {
    for (std::string_view cjk : {"\u3002", "\uff01", "\uff1f", "\uff0c", "\uff1b"}) {
      const bool clause_mark = cjk == "\uff0c" || cjk == "\uff1b";
      if ((!clause_mark || clauses) && text.substr(i, cjk.size()) == cjk) return i + cjk.size();
    }
    const char c = text[i];
    const bool mark = c == '.' || c == '!' || c == '?' || (clauses && (c == ',' || c == ';'));
    if (!mark) continue;
    if (i + 1 < text.size() && (text[i + 1] == ' ' || text[i + 1] == '\n' || text[i + 1] == '\t')) return i + 1;
    if (i + 1 == text.size() && at_end) return i + 1;
  }
  return 0;
}

std::string trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

class SpeechStreamSession : public std::enable_shared_from_this<SpeechStreamSession> {
 public:
  SpeechStreamSession(const ServingContext& context, const SpeechOptions& options, std::shared_ptr<WebSocket> socket)
      : context_(context),
        options_(options),
        socket_(socket),
        responder_(std::make_shared<SocketResponder>(std::move(socket))) {}

  void on_message(const std::string& text, bool binary) {
    if (closed_) return;
    if (binary) return send_error("binary messages are not accepted; send JSON text messages");
    Json message;
    try {
      message = Json::parse(text);
    } catch (const Json::exception& e) {
      return send_error(fmt::format("malformed JSON: {}", e.what()));
    }
    const std::string type = message.is_object() && message.value("type", Json()).is_string()
                                 ? message["type"].get<std::string>()
                                 : std::string();
    if (!config_) {
      if (type != "session.config") {
        send_error("the first message must be {\"type\": \"session.config\", \"session\": {...}}", "type");
        return socket_->close();
      }
      return configure(message);
    }
    if (type == "input.text") {
      if (input_done_) return send_error("input.text after input.done", "type");
      if (!message.contains("text") || !message["text"].is_string()) {
        return send_error("input.text needs 'text', a string", "text");
      }
      pending_ += message["text"].get<std::string>();
      split(false);
      return pump();
    }
    if (type == "input.done") {
      input_done_ = true;
      split(true);
      if (std::string rest = trimmed(pending_); !rest.empty()) sentences_.push_back(rest);
      pending_.clear();
      return pump();
    }
    if (type == "session.config") return send_error("the session is configured already", "type");
    send_error(fmt::format("unknown message type '{}'; expected input.text or input.done", type), "type");
  }

  void on_closed() {
    closed_ = true;
    sentences_.clear();
    responder_->closed();  // aborts the sentence in flight
  }

 private:
  void send(const Json& event) { socket_->send_text(event.dump()); }
  void send_error(const std::string& message, std::optional<std::string> param = std::nullopt) {
    send({{"type", "error"}, {"message", message}, {"param", param ? Json(*param) : Json()}});
  }

  void configure(const Json& message) {
    Json fields = message.contains("session") && message["session"].is_object() ? message["session"] : message;
    fields.erase("type");
    try {
      if (auto it = fields.find("stream_audio"); it != fields.end()) {
        if (!it->is_boolean()) throw_invalid_field("stream_audio", "'stream_audio' must be a boolean");
        stream_audio_ = it->get<bool>();
        fields.erase(it);
      }
      if (auto it = fields.find("split_granularity"); it != fields.end()) {
        if (*it != "sentence" && *it != "clause") {
          throw_invalid_field("split_granularity", "'split_granularity' must be 'sentence' or 'clause'");
        }
        clauses_ = *it == "clause";
        fields.erase(it);
      }
      fields.erase("input");
      fields.erase("stream");
      fields.erase("stream_format");
      if (!fields.contains("response_format")) fields["response_format"] = stream_audio_ ? "pcm" : "wav";
      context_.resolve_model(fields);
      Json probe = fields;
      probe["input"] = "probe";
      const SpeechRequest parsed = parse_speech_request(probe, options_);
      if (stream_audio_ && parsed.format != media::AudioFormat::kPcm) {
        throw_invalid_field("response_format", "stream_audio needs response_format 'pcm'");
      }
      if (stream_audio_ && parsed.speed != 1.0) {
        throw_invalid_field("speed", "stream_audio sends audio as it is decoded, so it needs speed 1.0");
      }
    } catch (const InvalidField& e) {
      send_error(e.what(), e.field());
      return socket_->close();
    } catch (const Error& e) {
      send_error(e.what());
      return socket_->close();
    }
    config_ = std::move(fields);
    send({{"type", "session.configured"}});
  }

  void split(bool at_end) {
    for (size_t end; (end = sentence_end(pending_, clauses_, at_end)) > 0;) {
      if (std::string sentence = trimmed(std::string_view(pending_).substr(0, end)); !sentence.empty()) {
        sentences_.push_back(std::move(sentence));
      }
      pending_.erase(0, end);
    }
  }

  // Starts the next sentence when none is being spoken; ends the session when all are.
  void pump() {
    if (closed_ || speaking_) return;
    if (sentences_.empty()) {
      if (input_done_ && !done_sent_) {
        done_sent_ = true;
        send({{"type", "session.done"}, {"total_sentences", next_index_}});
        socket_->close();
      }
      return;
    }
    speaking_ = true;
    const std::string sentence = std::move(sentences_.front());
    sentences_.pop_front();
    index_ = next_index_++;
    bytes_ = 0;
    file_.clear();
    unstretched_.clear();
    encoder_.reset();
    error_.reset();
    Json body = *config_;
    body["input"] = sentence;
    try {
      request_ = parse_speech_request(body, options_);
    } catch (const Error& e) {
      send({{"type", "audio.start"}, {"sentence_index", index_}, {"sentence_text", sentence}, {"format", ""}});
      return finish_sentence(e.what());
    }
    send({{"type", "audio.start"},
          {"sentence_index", index_},
          {"sentence_text", sentence},
          {"format", std::string(media::audio_format_name(request_.format))}});
    auto self = shared_from_this();
    with_speaker_embedding(
        options_, responder_, request_, [self] { self->generate(); },
        [self](std::exception_ptr error) {
          try {
            std::rethrow_exception(error);
          } catch (const std::exception& e) {
            self->finish_sentence(e.what());
          }
        });
  }

  void generate() {
    if (closed_) return;
    auto self = shared_from_this();
    std::vector<runtime::GenerationRequest> requests;
    requests.push_back(speech_generation_request(request_, fmt::format("speech-stream-{}", index_) + random_suffix()));
    try {
      run_ = GenerationRun::start(context_, responder_, std::move(requests),
                                  {[self](size_t, const runtime::ResponseEvent& event) { self->on_event(event); },
                                   [self] {
                                     self->run_.reset();
                                     self->finish_sentence(self->error_);
                                   }},
                                  std::chrono::steady_clock::now());
    } catch (const Error& e) {
      finish_sentence(e.what());
    }
  }

  static std::string random_suffix() { return random_request_id("-"); }

  void on_event(const runtime::ResponseEvent& event) {
    if (event.error && !error_) error_ = event.error->what();
    if (error_ || event.audio.empty() || closed_) return;
    if (!encoder_) {
      sample_rate_ = event.audio_sample_rate;
      encoder_ = media::make_audio_encoder(request_.format, {sample_rate_, stream_audio_});
    }
    if (request_.speed != 1.0) {
      unstretched_.insert(unstretched_.end(), event.audio.begin(), event.audio.end());
      return;
    }
    emit(encoder_->encode(event.audio));
  }

  void emit(std::string bytes) {
    if (bytes.empty()) return;
    bytes_ += bytes.size();
    if (stream_audio_) {
      socket_->send_binary(std::move(bytes));
    } else {
      file_ += bytes;
    }
  }

  void finish_sentence(std::optional<std::string> error) {
    if (closed_) return;
    if (!error) {
      if (!encoder_) {
        sample_rate_ = kDefaultSampleRate;
        encoder_ = media::make_audio_encoder(request_.format, {sample_rate_, stream_audio_});
      }
      if (!unstretched_.empty())
        emit(encoder_->encode(media::time_stretch(unstretched_, request_.speed, sample_rate_)));
      emit(encoder_->finish());
      if (!stream_audio_ && !file_.empty()) socket_->send_binary(std::move(file_));
    }
    send({{"type", "audio.done"},
          {"sentence_index", index_},
          {"total_bytes", bytes_},
          {"error", error ? Json(*error) : Json()}});
    speaking_ = false;
    pump();
  }

  const ServingContext& context_;
  const SpeechOptions& options_;
  std::shared_ptr<WebSocket> socket_;
  std::shared_ptr<SocketResponder> responder_;
  std::optional<Json> config_;
  bool stream_audio_ = false;
  bool clauses_ = false;
  std::string pending_;
  std::deque<std::string> sentences_;
  bool input_done_ = false, speaking_ = false, done_sent_ = false, closed_ = false;
  int next_index_ = 0, index_ = 0;
  // The sentence being spoken.
  SpeechRequest request_;
  std::shared_ptr<GenerationRun> run_;
  std::unique_ptr<media::AudioEncoder> encoder_;
  int sample_rate_ = 0;
  std::string file_;
  std::vector<float> unstretched_;
  size_t bytes_ = 0;
  std::optional<std::string> error_;
};

}  // namespace

void add_speech_stream_route(Router& router, const ServingContext& context, const SpeechOptions& options) {
  router.add_websocket(
      "/v1/audio/speech/stream", [&context, &options](HttpRequest&, std::shared_ptr<WebSocket> socket) {
        auto session = std::make_shared<SpeechStreamSession>(context, options, socket);
        return WebSocketCallbacks{[session](std::string message, bool binary) { session->on_message(message, binary); },
                                  [session] { session->on_closed(); }};
      });
}

}  // namespace omni::server
