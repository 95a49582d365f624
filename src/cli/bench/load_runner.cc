// The benchmark's only translation unit with Asio/Beast. Each request is a C++20 coroutine on
// one io_context; connections are kept alive and reused through an idle pool.
#include "cli/bench/load_runner.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>

#include "base/error.h"
#include "base/json.h"

namespace omni::cli::bench {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using net::awaitable;
using net::use_awaitable;
using Clock = std::chrono::steady_clock;

namespace {

struct Connection {
  explicit Connection(net::io_context& ioc) : stream(ioc) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
};

// Splits an SSE body into events as bytes arrive and times the ones that carry output text.
class SseTimer {
 public:
  SseTimer(bool chat, Clock::time_point start, RequestOutcome& outcome) : chat_(chat), start_(start), out_(outcome) {}

  void feed(std::string_view bytes) {
    Clock::time_point now = Clock::now();
    pending_.append(bytes);
    size_t end;
    while ((end = pending_.find("\n\n")) != std::string::npos) {
      std::string event = pending_.substr(0, end);
      pending_.erase(0, end + 2);
      on_event(event, now);
    }
  }
  bool done() const { return done_; }
  int chunks_with_text() const { return chunks_; }
  const std::optional<int>& completion_tokens() const { return completion_tokens_; }
  const std::optional<int>& prompt_tokens() const { return prompt_tokens_; }

 private:
  void on_event(const std::string& event, Clock::time_point now) {
    if (event.rfind("data: ", 0) != 0) return;
    std::string_view data = std::string_view(event).substr(6);
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
    ++chunks_;
    out_.generated_text += text;
  }

  bool chat_;
  Clock::time_point start_;
  RequestOutcome& out_;
  std::string pending_;
  bool done_ = false;
  int chunks_ = 0;
  double last_ = 0;
  std::optional<int> completion_tokens_;
  std::optional<int> prompt_tokens_;
};

class LoadGenerator {
 public:
  LoadGenerator(const LoadOptions& options, const std::vector<BenchRequest>& requests)
      : options_(options), requests_(requests), slot_freed_(ioc_) {}

  LoadResult run() {
    result_.outcomes.resize(requests_.size());
    resolve();
    start_ = Clock::now();
    net::co_spawn(ioc_, dispatch(), net::detached);
    ioc_.run();
    result_.duration_s = std::chrono::duration<double>(last_end_ - start_).count();
    return std::move(result_);
  }

 private:
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

  // Sends request i at its arrival time (Poisson, or all at once), waiting for a free slot when
  // --max-concurrency is reached.
  awaitable<void> dispatch() {
    std::mt19937_64 rng(options_.seed);
    bool all_at_once = !(options_.request_rate > 0) || std::isinf(options_.request_rate);
    std::exponential_distribution<double> gap(all_at_once ? 1.0 : options_.request_rate);
    net::steady_timer timer(ioc_);
    Clock::time_point arrival = start_;
    for (size_t i = 0; i < requests_.size(); ++i) {
      if (!all_at_once) {
        if (i > 0) arrival += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
        timer.expires_at(arrival);
        co_await timer.async_wait(use_awaitable);
      }
      while (options_.max_concurrency && in_flight_ >= *options_.max_concurrency) {
        slot_freed_.expires_at(Clock::time_point::max());
        beast::error_code ec;
        co_await slot_freed_.async_wait(net::redirect_error(use_awaitable, ec));
      }
      ++in_flight_;
      result_.max_concurrent = std::max(result_.max_concurrent, in_flight_);
      net::co_spawn(ioc_, send(i), net::detached);
    }
  }

  std::unique_ptr<Connection> take_connection() {
    if (idle_.empty()) return nullptr;
    auto connection = std::move(idle_.back());
    idle_.pop_back();
    return connection;
  }

  awaitable<void> send(size_t index) {
    RequestOutcome& out = result_.outcomes[index];
    const BenchRequest& request = requests_[index];
    out.prompt_len = request.prompt_len;
    Clock::time_point sent = Clock::now();
    out.start_s = std::chrono::duration<double>(sent - start_).count();
    auto timeout =
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.request_timeout_s));
    std::unique_ptr<Connection> connection;
    bool reusable = false;
    try {
      // A pooled connection may have been closed by the server since; retry once on a new one.
      for (int attempt = 0; attempt < 2; ++attempt) {
        connection = take_connection();
        bool fresh = !connection;
        if (fresh) {
          connection = std::make_unique<Connection>(ioc_);
          connection->stream.expires_after(timeout);
          co_await connection->stream.async_connect(endpoint_, use_awaitable);
          beast::error_code ignored;
          connection->stream.socket().set_option(tcp::no_delay(true), ignored);
        }
        http::request<http::string_body> message{http::verb::post, options_.target.path_prefix + options_.endpoint, 11};
        message.set(http::field::host, options_.target.host);
        message.set(http::field::content_type, "application/json");
        message.set(http::field::user_agent, "omnistage-bench");
        if (!options_.target.api_key.empty())
          message.set(http::field::authorization, "Bearer " + options_.target.api_key);
        message.keep_alive(true);
        message.body() = request.body;
        message.prepare_payload();
        beast::error_code ec;
        connection->stream.expires_after(timeout);
        co_await http::async_write(connection->stream, message, net::redirect_error(use_awaitable, ec));
        if (ec && !fresh) continue;
        if (ec) throw beast::system_error(ec);
        reusable = co_await receive(*connection, sent, timeout, out, fresh);
        break;
      }
    } catch (const std::exception& e) {
      if (out.error.empty()) out.error = e.what();
      out.success = false;
      reusable = false;
    }
    if (out.latency_s == 0) out.latency_s = std::chrono::duration<double>(Clock::now() - sent).count();
    last_end_ = std::max(last_end_, Clock::now());
    if (reusable) idle_.push_back(std::move(connection));
    --in_flight_;
    slot_freed_.cancel();
  }

  // Reads one response; returns whether the connection may be reused.
  awaitable<bool> receive(Connection& connection, Clock::time_point sent, Clock::duration timeout, RequestOutcome& out,
                          bool fresh) {
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    SseTimer sse(options_.chat, sent, out);
    auto on_chunk = [&sse](std::uint64_t, beast::string_view body, beast::error_code&) -> std::size_t {
      sse.feed(std::string_view(body.data(), body.size()));
      return body.size();
    };
    parser.on_chunk_body(on_chunk);
    connection.stream.expires_after(timeout);
    co_await http::async_read_header(connection.stream, connection.buffer, parser, use_awaitable);
    while (!parser.is_done()) {
      connection.stream.expires_after(timeout);
      co_await http::async_read_some(connection.stream, connection.buffer, parser, use_awaitable);
    }
    out.latency_s = std::chrono::duration<double>(Clock::now() - sent).count();
    auto& response = parser.get();
    int status = response.result_int();
    if (!response.body().empty()) sse.feed(response.body());  // a stream sent without chunking
    if (status != 200) {
      out.error = fmt::format("HTTP {}: {}", status, response.body().substr(0, 500));
    } else if (out.error.empty() && !sse.done()) {
      out.error = "the stream ended without data: [DONE]";
    }
    out.success = out.error.empty();
    out.output_tokens = sse.completion_tokens().value_or(sse.chunks_with_text());
    if (sse.prompt_tokens()) out.prompt_len = *sse.prompt_tokens();
    co_return response.keep_alive();
  }

  const LoadOptions& options_;
  const std::vector<BenchRequest>& requests_;
  net::io_context ioc_{1};
  tcp::endpoint endpoint_;
  net::steady_timer slot_freed_;
  std::vector<std::unique_ptr<Connection>> idle_;
  int in_flight_ = 0;
  Clock::time_point start_;
  Clock::time_point last_end_;
  LoadResult result_;
};

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
