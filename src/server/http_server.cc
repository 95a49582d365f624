// The only translation unit of the server that includes Boost.Beast (it compiles slowly).
//
// One Session per connection, all of its state touched only on its strand. An upgrade request the
// WebSocket handler accepts moves the socket to a WebSocketSession (same strand): a read loop that
// hands each message to the handler's callbacks and one write queue. A request is read
// header first (so that an oversized Content-Length is refused before its body arrives and
// `Expect: 100-continue` is honoured), handed to the handler, and while the handler's answer is
// pending a one-read "watch" on the socket notices a client that goes away, so that the handler
// can abort its work. Responses are serialized here by hand (whole, or chunked for streams) into
// one write queue.
#include "server/http_server.h"

#include <algorithm>
#include <array>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <iterator>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "base/error.h"
#include "base/log.h"

namespace omni::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;  // NOLINT(readability-identifier-naming): Asio's own spelling

namespace {

// Bytes a client may pipeline while its previous answer is pending before we stop reading them.
constexpr size_t kPipelineLimit = size_t{1024} * 1024;
constexpr auto kLingerTimeout = std::chrono::seconds(2);
// After a failed accept (out of file descriptors, say) the next one waits this long, so that a
// full descriptor table does not turn the acceptor into a busy loop.
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(100);
// What a client refused for the connection cap is told to wait before trying again.
constexpr const char* kRetryAfterSeconds = "1";

std::string_view sv(beast::string_view s) { return {s.data(), s.size()}; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string status_line(int status) {
  return fmt::format("HTTP/1.1 {} {}\r\n", status, sv(http::obsolete_reason(static_cast<http::status>(status))));
}

}  // namespace

std::string_view HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key == name) return value;
  }
  return {};
}

class Session;

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  HttpServerOptions options;
  HttpHandler handler;
  WebSocketHandler websocket_handler;
  HttpErrorRenderer error_renderer;
  net::io_context ioc;
  tcp::acceptor acceptor{net::make_strand(ioc)};
  net::steady_timer accept_retry{acceptor.get_executor()};
  std::vector<std::thread> threads;
  std::atomic<bool> stopping{false};
  std::atomic<bool> stopped{false};
  bool running = false;
  uint16_t bound_port = 0;

  std::mutex mutex;
  std::condition_variable sessions_changed;
  struct OpenSession {
    std::weak_ptr<Session> session;
    bool counted = false;  // counts against limits.max_connections (a refused one does not)
  };
  std::unordered_map<Session*, OpenSession> open_sessions;
  size_t counted_sessions = 0;

  void accept();
  void on_accept(beast::error_code ec, tcp::socket socket);
  void session_closed(Session* session) {
    std::lock_guard lock(mutex);
    auto it = open_sessions.find(session);
    if (it == open_sessions.end()) return;
    if (it->second.counted) --counted_sessions;
    open_sessions.erase(it);
    sessions_changed.notify_all();
  }
  std::vector<std::shared_ptr<Session>> live_sessions() {
    std::lock_guard lock(mutex);
    std::vector<std::shared_ptr<Session>> out;
    for (auto& [raw, open] : open_sessions) {
      if (auto s = open.session.lock()) out.push_back(std::move(s));
    }
    return out;
  }
  // Waits until no connection is open or `timeout` passed; true when none is open.
  bool wait_closed(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex);
    return sessions_changed.wait_for(lock, timeout, [&] { return open_sessions.empty(); });
  }
};

namespace websocket = beast::websocket;

// One upgraded connection; its state is touched only on the socket's strand.
class WebSocketSession final : public WebSocket, public std::enable_shared_from_this<WebSocketSession> {
 public:
  WebSocketSession(std::shared_ptr<const void> server, net::any_io_executor strand, size_t max_message_bytes)
      : server_(std::move(server)), strand_(std::move(strand)), max_message_bytes_(max_message_bytes) {}

  void start(tcp::socket socket, http::request<http::string_body> upgrade, WebSocketCallbacks callbacks) {
    callbacks_ = std::move(callbacks);
    ws_.emplace(std::move(socket));
    ws_->set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_->set_option(websocket::stream_base::decorator(
        [](websocket::response_type& response) { response.set(http::field::server, "omnistage"); }));
    ws_->read_message_max(max_message_bytes_);
    ws_->async_accept(upgrade, [self = shared_from_this()](beast::error_code ec) {
      if (ec) return self->finish();
      self->accepted_ = true;
      self->flush();
      self->read();
    });
  }

  void send_text(std::string text) override { enqueue(std::move(text), false); }
  void send_binary(std::string bytes) override { enqueue(std::move(bytes), true); }
  void close() override {
    net::dispatch(strand_, [self = shared_from_this()] {
      self->closing_ = true;
      self->flush();
    });
  }
  void run(std::function<void()> task) override { net::post(strand_, std::move(task)); }

 private:
  void enqueue(std::string data, bool binary) {
    net::dispatch(strand_, [self = shared_from_this(), data = std::move(data), binary]() mutable {
      if (self->closed_ || self->closing_) return;
      self->queue_.emplace_back(std::move(data), binary);
      self->flush();
    });
  }

  void flush() {
    if (!accepted_ || writing_ || closed_) return;
    if (queue_.empty()) {
      if (closing_ && !close_sent_) {
        close_sent_ = true;
        ws_->async_close(websocket::close_code::normal,
                         [self = shared_from_this()](beast::error_code) { self->finish(); });
      }
      return;
    }
    writing_ = true;
    ws_->binary(queue_.front().second);
    ws_->async_write(net::buffer(queue_.front().first), [self = shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      self->queue_.pop_front();
      if (ec) return self->finish();
      self->flush();
    });
  }

  void read() {
    ws_->async_read(buffer_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->finish();
      std::string message = beast::buffers_to_string(self->buffer_.data());
      self->buffer_.consume(self->buffer_.size());
      if (self->callbacks_.on_message && !self->closed_) {
        try {
          self->callbacks_.on_message(std::move(message), self->ws_->got_binary());
        } catch (const std::exception& e) {
          spdlog::error("websocket: message handler failed: {}", e.what());
        }
      }
      if (!self->closed_) self->read();
    });
  }

  // The connection is over: the handler hears it once, queued messages are dropped.
  void finish() {
    if (closed_) return;
    closed_ = true;
    queue_.clear();
    beast::error_code ec;
    if (ws_) ws_->next_layer().close(ec);
    auto on_closed = std::move(callbacks_.on_closed);
    callbacks_ = {};
    if (on_closed) on_closed();
  }

  // The server (its io_context), kept until the socket and the strand are gone: a backend thread
  // may release the last reference after the server is destroyed.
  std::shared_ptr<const void> server_;
  net::any_io_executor strand_;
  const size_t max_message_bytes_;
  std::optional<websocket::stream<tcp::socket>> ws_;
  WebSocketCallbacks callbacks_;
  beast::flat_buffer buffer_;
  std::deque<std::pair<std::string, bool>> queue_;
  bool accepted_ = false, writing_ = false, closing_ = false, close_sent_ = false, closed_ = false;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<HttpServer::Impl> server)
      : server_(std::move(server)), stream_(std::move(socket)) {}
  ~Session() {
    if (!closed_) server_->session_closed(this);
  }

  net::any_io_executor executor() { return stream_.get_executor(); }
  const std::shared_ptr<HttpServer::Impl>& server() const { return server_; }

  void start() {
    beast::error_code ec;
    stream_.socket().set_option(tcp::no_delay(true), ec);  // SSE chunks must not wait for Nagle
    read_request();
  }
  // Over the connection cap: answers 503 without reading a request, and closes.
  void refuse(size_t open_connections) {
    answer_transport_error(
        503, fmt::format("the server is at its limit of {} open connections; retry later", open_connections),
        {{"Retry-After", kRetryAfterSeconds}});
  }

  // --- called on the strand by the server while stopping ---
  void on_server_stopping() {
    if (!in_exchange_) close();
  }
  void give_up_exchange() { fire_disconnect(); }
  void close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
    fire_disconnect();
    server_->session_closed(this);
  }

  // --- the Responder's operations, on the strand, for exchange `id` ---
  void respond(uint64_t id, HttpResponse response) {
    if (!current(id) || response_started_) return;
    response_started_ = true;
    finish_response();
    std::string out = status_line(response.status);
    out += fmt::format("Server: omnistage\r\nContent-Type: {}\r\nContent-Length: {}\r\n", response.content_type,
                       response.body.size());
    append_common_headers(out, response.headers);
    out += response.body;
    enqueue(std::move(out));
  }
  void start_stream(uint64_t id, int status, const std::string& content_type, const HttpHeaders& headers) {
    if (!current(id) || response_started_) return;
    response_started_ = true;
    std::string out = status_line(status);
    out += fmt::format("Server: omnistage\r\nContent-Type: {}\r\n", content_type);
    if (chunked_) {
      out += "Transfer-Encoding: chunked\r\n";
    } else {
      keep_alive_ = false;  // HTTP/1.0: the end of the stream is the end of the connection
    }
    append_common_headers(out, headers);
    enqueue(std::move(out));
  }
  void write(uint64_t id, std::string data) {
    if (!current(id) || !response_started_ || response_done_ || data.empty()) return;
    if (chunked_) {
      std::string framed = fmt::format("{:x}\r\n", data.size());
      framed += data;
      framed += "\r\n";
      enqueue(std::move(framed));
    } else {
      enqueue(std::move(data));
    }
  }
  void end_stream(uint64_t id) {
    if (!current(id) || !response_started_ || response_done_) return;
    finish_response();
    enqueue(chunked_ ? std::string("0\r\n\r\n") : std::string());
  }
  void add_disconnect_callback(uint64_t id, std::function<void()> callback) {
    if (id != exchange_id_ || response_done_) return;
    if (disconnected_) {
      callback();
      return;
    }
    on_disconnect_.push_back(std::move(callback));
  }

 private:
  bool current(uint64_t id) const { return id == exchange_id_ && in_exchange_ && !closed_ && !client_gone_; }

  void append_common_headers(std::string& out, const HttpHeaders& headers) {
    for (const auto& [name, value] : headers) out += fmt::format("{}: {}\r\n", name, value);
    bool keep = keep_alive_ && !server_->stopping;
    out += keep ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    if (!keep) keep_alive_ = false;
  }

  // The handler has said all it will say: nothing is left to abort.
  void finish_response() {
    response_done_ = true;
    on_disconnect_.clear();
  }

  void fire_disconnect() {
    if (!in_exchange_ || response_done_ || disconnected_) return;
    disconnected_ = true;
    auto callbacks = std::move(on_disconnect_);
    on_disconnect_.clear();
    for (auto& callback : callbacks) {
      try {
        callback();
      } catch (const std::exception& e) {
        spdlog::error("http: disconnect callback failed: {}", e.what());
      }
    }
  }

  const HttpLimits& limits() const { return server_->options.limits; }

  // Between requests of a keep-alive connection the idle timeout applies until the next request's
  // first byte; from then on (and on a new connection from its acceptance) the header timeout.
  void read_request() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(std::min<size_t>(limits().max_header_bytes, UINT32_MAX)));
    parser_->body_limit(limits().max_body_bytes);
    if (exchange_id_ > 0 && buffer_.size() == 0) {
      stream_.expires_after(limits().keep_alive_timeout);
      stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
        if (self->closed_) return;
        if (ec) return self->close();  // idle timeout, or the client closed its keep-alive connection
        self->buffer_.commit(n);
        self->read_header();
      });
      return;
    }
    read_header();
  }

  void read_header() {
    stream_.expires_after(limits().header_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (closed_) return;
    if (ec) return on_read_error(ec);
    if (server_->stopping) return close();
    const auto& header = parser_->get();
    if (size_t fields = static_cast<size_t>(std::distance(header.begin(), header.end()));
        fields > limits().max_header_fields) {
      return answer_transport_error(431, fmt::format("the request has {} header fields, more than the limit of {}",
                                                     fields, limits().max_header_fields));
    }
    stream_.expires_after(limits().body_timeout);
    if (lower(sv(header[http::field::expect])) == "100-continue" && !parser_->is_done()) {
      auto interim = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      net::async_write(stream_, net::buffer(*interim),
                       [self = shared_from_this(), interim](beast::error_code write_ec, size_t) {
                         if (write_ec) return self->close();
                         self->read_body();
                       });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_request(ec); });
  }

  void on_read_error(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      return answer_transport_error(
          413, fmt::format("the request body exceeds the limit of {} bytes", limits().max_body_bytes));
    }
    if (ec == http::error::header_limit) {
      return answer_transport_error(
          431, fmt::format("the request line and headers exceed the limit of {} bytes", limits().max_header_bytes));
    }
    if (ec == beast::error::timeout) {
      // The stream has closed the socket already: nothing can be answered.
      spdlog::debug("http: a client took longer than the header or body read timeout; connection closed");
      return close();
    }
    if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message) {
      return answer_transport_error(400, fmt::format("malformed HTTP request: {}", ec.message()));
    }
    close();  // end of stream, reset, keep-alive timeout
  }

  // A failure found before any handler ran; the request is not fully read, so the connection
  // cannot be reused.
  void answer_transport_error(int status, const std::string& message, const HttpHeaders& headers = {}) {
    begin_exchange(false, true);
    HttpResponse response = server_->error_renderer(status, message);
    response.headers.insert(response.headers.end(), headers.begin(), headers.end());
    respond(exchange_id_, std::move(response));
  }

  void on_request(beast::error_code ec) {
    if (closed_) return;
    if (ec) return on_read_error(ec);
    stream_.expires_never();
    http::request<http::string_body> message = parser_->release();
    HttpRequest request;
    request.received_at = std::chrono::steady_clock::now();
    request.method = std::string(sv(message.method_string()));
    std::string_view target = sv(message.target());
    size_t question = target.find('?');
    request.path = std::string(target.substr(0, question));
    if (question != std::string_view::npos) request.query = std::string(target.substr(question + 1));
    for (const auto& field : message) {
      request.headers.emplace_back(lower(sv(field.name_string())), std::string(sv(field.value())));
    }
    request.body = std::move(message.body());
    if (server_->websocket_handler && websocket::is_upgrade(message)) return upgrade(std::move(message), request);
    begin_exchange(message.keep_alive(), message.version() >= 11);
    watch();

    auto responder = make_responder();
    try {
      server_->handler(request, responder);
    } catch (const std::exception& e) {
      spdlog::error("http: handler for {} {} threw: {}", request.method, request.path, e.what());
      respond(exchange_id_, server_->error_renderer(500, fmt::format("internal error: {}", e.what())));
    }
  }

  // Hands the connection to a WebSocketSession when the handler accepts it; a refusal is answered
  // as an ordinary response.
  void upgrade(http::request<http::string_body> message, HttpRequest& request) {
    auto socket = std::make_shared<WebSocketSession>(server_, stream_.get_executor(), limits().max_body_bytes);
    std::variant<WebSocketCallbacks, HttpResponse> outcome;
    try {
      outcome = server_->websocket_handler(request, socket);
    } catch (const std::exception& e) {
      outcome = server_->error_renderer(500, fmt::format("internal error: {}", e.what()));
    }
    if (auto* refusal = std::get_if<HttpResponse>(&outcome)) {
      begin_exchange(false, true);
      return respond(exchange_id_, std::move(*refusal));
    }
    closed_ = true;
    server_->session_closed(this);
    socket->start(stream_.release_socket(), std::move(message), std::get<WebSocketCallbacks>(std::move(outcome)));
  }

  void begin_exchange(bool keep_alive, bool chunked) {
    ++exchange_id_;
    in_exchange_ = true;
    keep_alive_ = keep_alive && !server_->stopping;
    chunked_ = chunked;
    response_started_ = false;
    response_done_ = false;
    disconnected_ = false;
    on_disconnect_.clear();
  }

  std::shared_ptr<Responder> make_responder();

  // Reads while an answer is pending: an error means the client went away. Bytes that arrive are
  // kept in buffer_ for the next request (pipelining).
  void watch() {
    if (watching_ || closed_ || client_gone_ || buffer_.size() > kPipelineLimit) return;
    watching_ = true;
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](beast::error_code ec, size_t n) { self->on_watch(ec, n); });
  }

  void on_watch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (!ec) buffer_.commit(n);
    if (closed_) return;
    if (read_after_watch_) {
      read_after_watch_ = false;
      return read_request();
    }
    if (ec) return client_disconnected();
    if (in_exchange_) watch();
  }

  void client_disconnected() {
    if (client_gone_) return;
    client_gone_ = true;
    fire_disconnect();
    if (!writing_) close();
  }

  void enqueue(const std::string& bytes) {
    if (closed_ || client_gone_) return;
    pending_ += bytes;
    if (!writing_) write_pending();
  }

  void write_pending() {
    if (pending_.empty()) {
      if (response_done_ && in_exchange_) finish_exchange();
      return;
    }
    writing_ = true;
    in_flight_ = std::move(pending_);
    pending_.clear();
    net::async_write(stream_, net::buffer(in_flight_), [self = shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return self->client_disconnected();
      if (self->client_gone_) return self->close();
      self->write_pending();
    });
  }

  void finish_exchange() {
    in_exchange_ = false;
    if (!keep_alive_ || server_->stopping) return linger_close();
    if (watching_) {
      read_after_watch_ = true;
      beast::error_code ec;
      stream_.socket().cancel(ec);
      return;
    }
    read_request();
  }

  // Half-closes and drains what the client still sends, so that it reads our answer instead of
  // a connection reset (we may not have read its whole request).
  void linger_close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec || watching_) return close();
    auto sink = std::make_shared<std::array<char, 4096>>();
    stream_.expires_after(kLingerTimeout);
    drain(sink);
  }
  void drain(const std::shared_ptr<std::array<char, 4096>>& sink) {
    stream_.async_read_some(net::buffer(*sink), [self = shared_from_this(), sink](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->drain(sink);
    });
  }

  // Declared before the stream, so destroyed after it: the stream's executor lives in the server's
  // io_context, and the last Session may be released by a backend thread after the server is gone.
  std::shared_ptr<HttpServer::Impl> server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;

  uint64_t exchange_id_ = 0;
  bool in_exchange_ = false;  // a request was read and its answer is not fully written
  bool keep_alive_ = true;
  bool chunked_ = true;  // HTTP/1.1 client: streams are chunked
  bool response_started_ = false;
  bool response_done_ = false;  // the handler finished its answer (bytes may still be queued)
  bool disconnected_ = false;   // on_disconnect callbacks fired for this exchange
  bool client_gone_ = false;
  bool closed_ = false;
  bool watching_ = false;
  bool read_after_watch_ = false;  // the next request is read once the watch read returns
  bool writing_ = false;
  std::string pending_;
  std::string in_flight_;
  std::vector<std::function<void()>> on_disconnect_;
};

namespace {

class SessionResponder : public Responder {
 public:
  SessionResponder(std::shared_ptr<Session> session, uint64_t exchange)
      : session_(std::move(session)), exchange_(exchange) {}

  void respond(HttpResponse response) override {
    dispatch([s = session_, id = exchange_, r = std::move(response)]() mutable { s->respond(id, std::move(r)); });
  }
  void start_stream(int status, std::string content_type, HttpHeaders headers) override {
    dispatch([s = session_, id = exchange_, status, type = std::move(content_type), h = std::move(headers)] {
      s->start_stream(id, status, type, h);
    });
  }
  void write(std::string data) override {
    dispatch([s = session_, id = exchange_, d = std::move(data)]() mutable { s->write(id, std::move(d)); });
  }
  void end_stream() override {
    dispatch([s = session_, id = exchange_] { s->end_stream(id); });
  }
  // Posted, never run inline: an event must not overtake the handler that is still starting the
  // response on this strand.
  void run(std::function<void()> task) override {
    if (session_->server()->stopped) return;
    net::post(session_->executor(), std::move(task));
  }
  void on_disconnect(std::function<void()> callback) override {
    dispatch([s = session_, id = exchange_, c = std::move(callback)]() mutable {
      s->add_disconnect_callback(id, std::move(c));
    });
  }

 private:
  template <typename F>
  void dispatch(F&& task) {
    if (session_->server()->stopped) return;
    net::dispatch(session_->executor(), std::forward<F>(task));
  }

  std::shared_ptr<Session> session_;
  uint64_t exchange_;
};

}  // namespace

std::shared_ptr<Responder> Session::make_responder() {
  return std::make_shared<SessionResponder>(shared_from_this(), exchange_id_);
}

void HttpServer::Impl::accept() {
  acceptor.async_accept(net::make_strand(ioc), [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    self->on_accept(ec, std::move(socket));
  });
}

void HttpServer::Impl::on_accept(beast::error_code ec, tcp::socket socket) {
  if (stopping) return;
  if (ec) {
    spdlog::warn("http: accept failed: {}; accepting again in {} ms", ec.message(), kAcceptRetryDelay.count());
    accept_retry.expires_after(kAcceptRetryDelay);
    accept_retry.async_wait([self = shared_from_this()](beast::error_code wait_ec) {
      if (!wait_ec && !self->stopping) self->accept();
    });
    return;
  }
  auto session = std::make_shared<Session>(std::move(socket), shared_from_this());
  bool refused = false;
  {
    std::lock_guard lock(mutex);
    const size_t cap = options.limits.max_connections;
    refused = cap > 0 && counted_sessions >= cap;
    if (!refused) ++counted_sessions;
    open_sessions.emplace(session.get(), OpenSession{session, !refused});
  }
  if (refused) {
    net::dispatch(session->executor(), [session, cap = options.limits.max_connections] { session->refuse(cap); });
  } else {
    net::dispatch(session->executor(), [session] { session->start(); });
  }
  accept();
}

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler, HttpErrorRenderer error_renderer,
                       WebSocketHandler websocket_handler)
    : impl_(std::make_shared<Impl>()) {
  impl_->options = std::move(options);
  impl_->handler = std::move(handler);
  impl_->websocket_handler = std::move(websocket_handler);
  impl_->error_renderer = std::move(error_renderer);
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  Impl& impl = *impl_;
  if (impl.running) return;
  if (impl.options.io_threads < 1) {
    throw_error(ErrorCode::kInvalidArgument, "HTTP server: io_threads must be at least 1, got {}",
                impl.options.io_threads);
  }
  beast::error_code ec;
  tcp::endpoint endpoint;
  if (auto address = net::ip::make_address(impl.options.host, ec); !ec) {
    endpoint = tcp::endpoint(address, impl.options.port);
  } else {
    tcp::resolver resolver(impl.ioc);
    auto results = resolver.resolve(impl.options.host, "", tcp::resolver::passive, ec);
    if (ec || results.empty()) {
      throw_error(ErrorCode::kInvalidArgument, "--host {}: not an IP address, and resolving it failed: {}",
                  impl.options.host, ec ? ec.message() : std::string("no address"));
    }
    // An IPv4 address first: "localhost" is then 127.0.0.1, where clients look for it.
    auto chosen = results.begin();
    for (auto it = results.begin(); it != results.end(); ++it) {
      if (it->endpoint().address().is_v4()) {
        chosen = it;
        break;
      }
    }
    endpoint = tcp::endpoint(chosen->endpoint().address(), impl.options.port);
  }
  auto fail = [&](const char* what) {
    throw_error(ErrorCode::kUnavailable, "cannot listen on {}:{}: {} failed: {}", impl.options.host, impl.options.port,
                what, ec.message());
  };
  impl.acceptor.open(endpoint.protocol(), ec);
  if (ec) fail("open");
  impl.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (impl.options.reuse_port) {
    impl.acceptor.set_option(net::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>(true), ec);
    if (ec) fail("setsockopt(SO_REUSEPORT)");
  }
  impl.acceptor.bind(endpoint, ec);
  if (ec) fail("bind");
  impl.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) fail("listen");
  impl.bound_port = impl.acceptor.local_endpoint().port();
  impl.running = true;
  impl.accept();
  for (int i = 0; i < impl.options.io_threads; ++i) {
    impl.threads.emplace_back([impl = impl_] { impl->ioc.run(); });
  }
}

uint16_t HttpServer::port() const { return impl_->bound_port; }

void HttpServer::stop() {
  Impl& impl = *impl_;
  if (!impl.running) return;
  impl.running = false;
  impl.stopping = true;
  // Closed on its strand (an accept may be in flight) and waited for, so that no connection is
  // accepted once stop() has moved on.
  std::promise<void> closed;
  net::post(impl.acceptor.get_executor(), [impl = impl_, &closed] {
    beast::error_code ec;
    impl->acceptor.close(ec);
    impl->accept_retry.cancel();
    closed.set_value();
  });
  closed.get_future().wait();
  for (auto& session : impl.live_sessions()) {
    net::post(session->executor(), [session] { session->on_server_stopping(); });
  }
  if (!impl.wait_closed(impl.options.drain_timeout)) {
    auto remaining = impl.live_sessions();
    spdlog::warn("http: {} exchange(s) still running after the drain timeout; aborting them", remaining.size());
    for (auto& session : remaining) {
      net::post(session->executor(), [session] { session->give_up_exchange(); });
    }
    if (!impl.wait_closed(std::chrono::seconds(2))) {
      for (auto& session : impl.live_sessions()) {
        net::post(session->executor(), [session] { session->close(); });
      }
      impl.wait_closed(std::chrono::seconds(1));
    }
  }
  impl.stopped = true;
  impl.ioc.stop();
  for (auto& thread : impl.threads) thread.join();
  impl.threads.clear();
}

}  // namespace omni::server
