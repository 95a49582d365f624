// The benchmark's only translation unit with Asio/Beast. Each request is an Exchange (a chain of
// completion handlers) on one io_context; connections are kept alive and reused through an idle
// pool.
#include "cli/bench/load_runner.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <memory>
#include <random>

#include "base/base64.h"
#include "base/error.h"
#include "base/json.h"
#include "cli/bench/wav_stream_meter.h"

namespace omni::cli::bench {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;  // NOLINT(readability-identifier-naming): Asio's own spelling
using Clock = std::chrono::steady_clock;

namespace {

struct Connection {
  explicit Connection(net::io_context& ioc) : stream(ioc) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
};

// Reads one response body as its bytes arrive and records what the outcome needs.
class ResponseMeter {
 public:
  virtual ~ResponseMeter() = default;
  virtual void feed(std::string_view bytes) = 0;
  // The body said it was complete ([DONE], the done event, or audio that ended cleanly).
  virtual bool done() const = 0;
  // At the end of the body: the counts the outcome keeps.
  virtual void finish(RequestOutcome& out) const = 0;
};

// Splits an SSE body into events as bytes arrive and hands each `data:` payload to on_data().
class SseMeter : public ResponseMeter {
 public:
  void feed(std::string_view bytes) override {
    Clock::time_point now = Clock::now();
    pending_.append(bytes);
    size_t end;
    while ((end = pending_.find("\n\n")) != std::string::npos) {
      std::string event = pending_.substr(0, end);
      pending_.erase(0, end + 2);
      if (event.rfind("data: ", 0) == 0) on_data(std::string_view(event).substr(6), now);
    }
  }

 protected:
  virtual void on_data(std::string_view data, Clock::time_point now) = 0;

 private:
  std::string pending_;
};

// Counts the audio of a chat's audio chunks, each piece a file of its own (a WAV file with its
// header, or headerless 16-bit mono PCM).
class ChatAudioPieces {
 public:
  explicit ChatAudioPieces(const LoadOptions& options)
      : pcm_(options.chat_audio_format == "pcm"), rate_(options.pcm_sample_rate) {}

  // Seconds of audio in one piece; sets `error` when it is not audio the benchmark can count.
  double seconds(std::string_view piece, std::string& error) const {
    if (pcm_) return static_cast<double>(piece.size() / 2) / rate_;
    WavStreamMeter wav;
    wav.feed(piece);
    if (!wav.error().empty()) {
      error = wav.error() + " (bench serve counts chat audio in --audio-format wav or pcm)";
      return 0;
    }
    if (!wav.in_samples()) error = "a chat audio piece ends inside its WAV header";
    return wav.seconds();
  }

 private:
  bool pcm_;
  int rate_;
};

// Times the chunks of a completions or chat stream that carry output text, and a chat's chunks
// with modality "audio" (delta.content: a base64 audio piece).
class TextSseMeter final : public SseMeter {
 public:
  TextSseMeter(bool chat, const LoadOptions& options, Clock::time_point start, RequestOutcome& outcome)
      : chat_(chat), audio_(options), start_(start), out_(outcome) {}

  bool done() const override { return done_; }
  void finish(RequestOutcome& out) const override {
    out.output_tokens = completion_tokens_.value_or(chunks_);
    if (prompt_tokens_) out.prompt_len = *prompt_tokens_;
  }

 private:
  void on_data(std::string_view data, Clock::time_point now) override {
    if (data == "[DONE]") {
      done_ = true;
      return;
    }
    Json chunk = Json::parse(data, nullptr, false);
    if (chunk.is_discarded()) {
      out_.error = "unparsable SSE event: " + std::string(data.substr(0, 200));
      return;
    }
    if (chunk.contains("error")) {
      out_.error = chunk["error"].dump();
      return;
    }
    if (auto usage = chunk.find("usage"); usage != chunk.end() && usage->is_object()) {
      completion_tokens_ = usage->value("completion_tokens", 0);
      prompt_tokens_ = usage->value("prompt_tokens", 0);
    }
    auto choices = chunk.find("choices");
    if (choices == chunk.end() || !choices->is_array() || choices->empty()) return;
    const Json& choice = choices->front();
    if (chat_ && chunk.value("modality", "text") == "audio") return on_audio(choice, now);
    std::string text;
    if (chat_) {
      auto delta = choice.find("delta");
      if (delta != choice.end() && delta->contains("content") && (*delta)["content"].is_string()) {
        text = (*delta)["content"].get<std::string>();
      }
    } else if (choice.contains("text") && choice["text"].is_string()) {
      text = choice["text"].get<std::string>();
    }
    if (text.empty()) return;
    double t = std::chrono::duration<double>(now - start_).count();
    if (chunks_ == 0) {
      out_.ttft_s = t;
    } else {
      out_.itl_s.push_back(t - last_);
    }
    last_ = t;
    out_.text_end_s = t;
    ++chunks_;
    out_.generated_text += text;
  }

  void on_audio(const Json& choice, Clock::time_point now) {
    auto delta = choice.find("delta");
    if (delta == choice.end() || !delta->is_object()) return;
    auto content = delta->find("content");
    if (content == delta->end() || !content->is_string() || content->get_ref<const std::string&>().empty()) return;
    std::string piece;
    try {
      piece = base64_decode(content->get<std::string>());
    } catch (const Error& e) {
      if (out_.error.empty()) out_.error = fmt::format("a chat audio chunk with invalid base64: {}", e.what());
      return;
    }
    std::string error;
    const double seconds = audio_.seconds(piece, error);
    if (!error.empty() && out_.error.empty()) out_.error = error;
    if (seconds <= 0) return;
    if (out_.audio_chunks++ == 0) out_.ttfp_s = std::chrono::duration<double>(now - start_).count();
    out_.audio_s += seconds;
  }

  bool chat_;
  ChatAudioPieces audio_;
  Clock::time_point start_;
  RequestOutcome& out_;
  bool done_ = false;
  int chunks_ = 0;
  double last_ = 0;
  std::optional<int> completion_tokens_;
  std::optional<int> prompt_tokens_;
};

// Times the packets of a speech stream that carry audio samples (the first one is the TTFP) and
// counts the seconds of audio, for both stream formats.
class AudioPackets {
 public:
  AudioPackets(Clock::time_point start, RequestOutcome& outcome) : start_(start), out_(outcome) {}

  void add(std::string_view wav_bytes, Clock::time_point now) {
    if (wav_.feed(wav_bytes) == 0) {
      if (!wav_.error().empty() && out_.error.empty()) out_.error = wav_.error();
      return;
    }
    double t = std::chrono::duration<double>(now - start_).count();
    if (packets_ == 0) {
      out_.ttft_s = out_.ttfp_s = t;
    } else {
      out_.itl_s.push_back(t - last_);
    }
    last_ = t;
    ++packets_;
    out_.audio_chunks = packets_;
  }
  bool has_header() const { return wav_.in_samples(); }
  void finish(RequestOutcome& out) const { out.audio_s = wav_.seconds(); }

 private:
  Clock::time_point start_;
  RequestOutcome& out_;
  WavStreamMeter wav_;
  int packets_ = 0;
  double last_ = 0;
};

// stream_format "audio": the body is the WAV file itself.
class AudioBodyMeter final : public ResponseMeter {
 public:
  AudioBodyMeter(Clock::time_point start, RequestOutcome& outcome) : packets_(start, outcome) {}
  void feed(std::string_view bytes) override { packets_.add(bytes, Clock::now()); }
  // A raw body has no end marker: a complete header is what can be checked.
  bool done() const override { return packets_.has_header(); }
  void finish(RequestOutcome& out) const override { packets_.finish(out); }

 private:
  AudioPackets packets_;
};

// stream_format "sse": speech.audio.delta events (base64 pieces of the WAV file), then
// speech.audio.done with the usage, or an error event.
class SpeechSseMeter final : public SseMeter {
 public:
  SpeechSseMeter(Clock::time_point start, RequestOutcome& outcome) : out_(outcome), packets_(start, outcome) {}
  bool done() const override { return done_; }
  void finish(RequestOutcome& out) const override {
    packets_.finish(out);
    if (output_tokens_) out.output_tokens = *output_tokens_;
    if (input_tokens_) out.prompt_len = *input_tokens_;
  }

 private:
  void on_data(std::string_view data, Clock::time_point now) override {
    Json event = Json::parse(data, nullptr, false);
    if (event.is_discarded() || !event.is_object()) {
      out_.error = "unparsable SSE event: " + std::string(data.substr(0, 200));
      return;
    }
    if (event.contains("error")) {
      out_.error = event["error"].dump();
      return;
    }
    const std::string type = event.value("type", "");
    if (type == "speech.audio.delta" && event.contains("audio") && event["audio"].is_string()) {
      try {
        packets_.add(base64_decode(event["audio"].get<std::string>()), now);
      } catch (const Error& e) {
        out_.error = fmt::format("speech.audio.delta with invalid base64: {}", e.what());
      }
    } else if (type == "speech.audio.done") {
      done_ = true;
      if (auto usage = event.find("usage"); usage != event.end() && usage->is_object()) {
        output_tokens_ = usage->value("output_tokens", 0);
        input_tokens_ = usage->value("input_tokens", 0);
      }
    }
  }

  RequestOutcome& out_;
  AudioPackets packets_;
  bool done_ = false;
  std::optional<int> output_tokens_;
  std::optional<int> input_tokens_;
};

std::unique_ptr<ResponseMeter> make_meter(const LoadOptions& options, Clock::time_point start,
                                          RequestOutcome& outcome) {
  switch (options.stream) {
    case StreamKind::kCompletions:
      return std::make_unique<TextSseMeter>(false, options, start, outcome);
    case StreamKind::kChat:
      return std::make_unique<TextSseMeter>(true, options, start, outcome);
    case StreamKind::kSpeechAudio:
      return std::make_unique<AudioBodyMeter>(start, outcome);
    case StreamKind::kSpeechSse:
      return std::make_unique<SpeechSseMeter>(start, outcome);
  }
  throw_error(ErrorCode::kInternal, "unknown stream kind {}", static_cast<int>(options.stream));
}

class LoadGenerator;

// One request from connect (or a pooled connection) to the end of its stream.
class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(LoadGenerator& generator, size_t index);
  void start();

 private:
  void send();
  void on_written(beast::error_code ec);
  void on_header(beast::error_code ec);
  void read_body();
  void finish(beast::error_code ec);

  LoadGenerator& generator_;
  size_t index_;
  RequestOutcome& out_;
  Clock::time_point sent_;
  Clock::duration timeout_;
  std::unique_ptr<Connection> connection_;
  bool fresh_ = false;
  bool retried_ = false;
  http::request<http::string_body> message_;
  std::optional<http::response_parser<http::string_body>> parser_;
  std::unique_ptr<ResponseMeter> meter_;
  std::function<std::size_t(std::uint64_t, beast::string_view, beast::error_code&)> on_chunk_;
};

class LoadGenerator {
 public:
  LoadGenerator(const LoadOptions& options, const std::vector<BenchRequest>& requests)
      : options_(options), requests_(requests), arrivals_(ioc_) {}

  LoadResult run() {
    result_.outcomes.resize(requests_.size());
    resolve();
    start_ = Clock::now();
    schedule_arrivals();
    ioc_.run();
    result_.duration_s = std::chrono::duration<double>(last_end_ - start_).count();
    return std::move(result_);
  }

 private:
  friend class Exchange;

  void resolve() {
    tcp::resolver resolver(ioc_);
    beast::error_code ec;
    auto results = resolver.resolve(options_.target.host, std::to_string(options_.target.port), ec);
    if (ec || results.empty()) {
      throw_error(ErrorCode::kUnavailable, "cannot resolve {}:{}: {}", options_.target.host, options_.target.port,
                  ec.message());
    }
    endpoint_ = results.begin()->endpoint();
  }

  // Arrival times: all at once, or a Poisson process of the requested rate.
  void schedule_arrivals() {
    bool all_at_once = !(options_.request_rate > 0) || std::isinf(options_.request_rate);
    if (all_at_once) {
      for (size_t i = 0; i < requests_.size(); ++i) ready_.push_back(i);
      pump();
      return;
    }
    std::mt19937_64 rng(options_.seed);
    std::exponential_distribution<double> gap(options_.request_rate);
    Clock::time_point arrival = start_;
    for (size_t i = 0; i < requests_.size(); ++i) {
      if (i > 0) arrival += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
      arrival_times_.push_back(arrival);
    }
    arm_next_arrival();
  }

  void arm_next_arrival() {
    if (next_arrival_ == arrival_times_.size()) return;
    arrivals_.expires_at(arrival_times_[next_arrival_]);
    arrivals_.async_wait([this](beast::error_code ec) {
      if (ec) return;
      ready_.push_back(next_arrival_++);
      pump();
      arm_next_arrival();
    });
  }

  // Starts arrived requests while --max-concurrency allows.
  void pump() {
    while (!ready_.empty() && (!options_.max_concurrency || in_flight_ < *options_.max_concurrency)) {
      size_t index = ready_.front();
      ready_.pop_front();
      ++in_flight_;
      result_.max_concurrent = std::max(result_.max_concurrent, in_flight_);
      std::make_shared<Exchange>(*this, index)->start();
    }
  }

  void finished(std::unique_ptr<Connection> reusable) {
    last_end_ = std::max(last_end_, Clock::now());
    if (reusable) idle_.push_back(std::move(reusable));
    --in_flight_;
    pump();
  }

  std::unique_ptr<Connection> take_connection() {
    if (idle_.empty()) return nullptr;
    auto connection = std::move(idle_.back());
    idle_.pop_back();
    return connection;
  }

  const LoadOptions& options_;
  const std::vector<BenchRequest>& requests_;
  net::io_context ioc_{1};
  tcp::endpoint endpoint_;
  net::steady_timer arrivals_;
  std::vector<Clock::time_point> arrival_times_;
  size_t next_arrival_ = 0;
  std::deque<size_t> ready_;
  std::vector<std::unique_ptr<Connection>> idle_;
  int in_flight_ = 0;
  Clock::time_point start_;
  Clock::time_point last_end_;
  LoadResult result_;
};

Exchange::Exchange(LoadGenerator& generator, size_t index)
    : generator_(generator),
      index_(index),
      out_(generator.result_.outcomes[index]),
      timeout_(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(generator.options_.request_timeout_s))) {}

void Exchange::start() {
  const LoadOptions& options = generator_.options_;
  const BenchRequest& request = generator_.requests_[index_];
  out_.prompt_len = request.prompt_len;
  sent_ = Clock::now();
  out_.start_s = std::chrono::duration<double>(sent_ - generator_.start_).count();
  message_ = {http::verb::post, options.target.path_prefix + options.endpoint, 11};
  message_.set(http::field::host, options.target.host);
  message_.set(http::field::content_type, "application/json");
  message_.set(http::field::user_agent, "omnistage-bench");
  if (!options.target.api_key.empty()) message_.set(http::field::authorization, "Bearer " + options.target.api_key);
  message_.keep_alive(true);
  message_.body() = request.body;
  message_.prepare_payload();
  send();
}

void Exchange::send() {
  connection_ = generator_.take_connection();
  fresh_ = !connection_;
  if (!fresh_) {
    connection_->stream.expires_after(timeout_);
    http::async_write(connection_->stream, message_,
                      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_written(ec); });
    return;
  }
  connection_ = std::make_unique<Connection>(generator_.ioc_);
  connection_->stream.expires_after(timeout_);
  connection_->stream.async_connect(generator_.endpoint_, [self = shared_from_this()](beast::error_code ec) {
    if (ec) return self->finish(ec);
    beast::error_code ignored;
    self->connection_->stream.socket().set_option(tcp::no_delay(true), ignored);
    self->connection_->stream.expires_after(self->timeout_);
    http::async_write(self->connection_->stream, self->message_,
                      [self](beast::error_code write_ec, size_t) { self->on_written(write_ec); });
  });
}

void Exchange::on_written(beast::error_code ec) {
  // A pooled connection may have been closed by the server since; retry once on a new one.
  if (ec && !fresh_ && !retried_) {
    retried_ = true;
    connection_.reset();
    return send();
  }
  if (ec) return finish(ec);
  parser_.emplace();
  parser_->body_limit(boost::none);
  meter_ = make_meter(generator_.options_, sent_, out_);
  // The parser keeps a reference to the callback: it lives in this Exchange, as the parser does.
  on_chunk_ = [this](std::uint64_t, beast::string_view body, beast::error_code&) -> std::size_t {
    meter_->feed(std::string_view(body.data(), body.size()));
    return body.size();
  };
  parser_->on_chunk_body(on_chunk_);
  connection_->stream.expires_after(timeout_);
  http::async_read_header(connection_->stream, connection_->buffer, *parser_,
                          [self = shared_from_this()](beast::error_code read_ec, size_t) { self->on_header(read_ec); });
}

void Exchange::on_header(beast::error_code ec) {
  if (ec) return finish(ec);
  read_body();
}

void Exchange::read_body() {
  if (parser_->is_done()) return finish({});
  connection_->stream.expires_after(timeout_);
  http::async_read_some(connection_->stream, connection_->buffer, *parser_,
                        [self = shared_from_this()](beast::error_code ec, size_t) {
                          if (ec) return self->finish(ec);
                          self->read_body();
                        });
}

void Exchange::finish(beast::error_code ec) {
  out_.latency_s = std::chrono::duration<double>(Clock::now() - sent_).count();
  bool reusable = false;
  if (ec) {
    if (out_.error.empty()) out_.error = ec.message();
  } else {
    auto& response = parser_->get();
    unsigned status = response.result_int();
    if (status != 200) {
      out_.error = fmt::format("HTTP {}: {}", status, response.body().substr(0, 500));
    } else {
      if (!response.body().empty()) meter_->feed(response.body());  // a stream sent without chunking
      if (out_.error.empty() && !meter_->done()) out_.error = "the stream ended before its end marker";
    }
    meter_->finish(out_);
    reusable = response.keep_alive();
  }
  out_.success = out_.error.empty();
  generator_.finished(reusable ? std::move(connection_) : nullptr);
}

}  // namespace

LoadResult run_load(const LoadOptions& options, const std::vector<BenchRequest>& requests) {
  return LoadGenerator(options, requests).run();
}

std::pair<int, std::string> http_get(const Target& target, const std::string& path, double timeout_s) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  tcp::resolver resolver(ioc);
  auto results = resolver.resolve(target.host, std::to_string(target.port), ec);
  auto fail = [&](const char* what) {
    throw_error(ErrorCode::kUnavailable, "cannot reach the server at {}:{} ({} failed: {})", target.host, target.port,
                what, ec.message());
  };
  if (ec) fail("resolve");
  stream.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s)));
  stream.connect(results, ec);
  if (ec) fail("connect");
  http::request<http::empty_body> request{http::verb::get, target.path_prefix + path, 11};
  request.set(http::field::host, target.host);
  if (!target.api_key.empty()) request.set(http::field::authorization, "Bearer " + target.api_key);
  http::write(stream, request, ec);
  if (ec) fail("write");
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  http::read(stream, buffer, response, ec);
  if (ec) fail("read");
  return {response.result_int(), response.body()};
}

}  // namespace omni::cli::bench
