// The HTTP exchange as the route handlers see it: a parsed request, and a Responder through which
// the handler answers now or later (possibly as a stream). Plain C++ so that route handlers never
// include Boost.Beast; http_server.cc is the only place that speaks the wire protocol.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace omni::server {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;   // as sent: "GET", "POST"…
  std::string path;     // the target without its query string
  std::string query;    // after '?', undecoded; empty when absent
  HttpHeaders headers;  // names lower-cased, in arrival order
  std::string body;
  // When the whole request had been read, for the server's own time per request.
  std::chrono::steady_clock::time_point received_at;

  // The first header named `name` (lower case), or "" when absent.
  std::string_view header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers;  // extra headers (Allow, WWW-Authenticate…)
};

// How a handler answers one request: exactly one respond(), or start_stream() followed by any
// number of write() and one end_stream(). Calls after the exchange has ended (client gone, server
// stopped) are ignored, so a handler never needs to check.
//
// Threads: every method may be called from any thread. Calls are executed in order on the
// connection's executor (a strand); run() queues arbitrary work there, which lets a handler keep
// per-request state without locks when all of it is touched from run() tasks. No method blocks.
// Lifetime: a Responder holds its connection open; the HttpServer must outlive every Responder's
// last call (a backend delivers its final event before the server is destroyed).
class Responder {
 public:
  virtual ~Responder() = default;

  virtual void respond(HttpResponse response) = 0;
  // Starts a chunked response; `headers` are added to Content-Type.
  virtual void start_stream(int status, std::string content_type, HttpHeaders headers = {}) = 0;
  virtual void write(std::string data) = 0;
  virtual void end_stream() = 0;

  virtual void run(std::function<void()> task) = 0;
  // `callback` runs (once, on the connection's executor) when the client disconnects, or the
  // server is stopping and gives up on the exchange, before the response has ended. Registering
  // after that moment runs the callback at once.
  virtual void on_disconnect(std::function<void()> callback) = 0;
};

// Handles one request. Called on the connection's executor; must not block (hand long work to a
// backend and answer through the Responder later). Exceptions escaping it are answered with 500.
using HttpHandler = std::function<void(HttpRequest& request, std::shared_ptr<Responder> responder)>;

// A WebSocket connection (RFC 6455) as its handler sees it, after the upgrade. Messages queued
// before the handshake has completed are sent once it has.
// Threads: every method may be called from any thread; sends and tasks run in order on the
// connection's executor, where the callbacks below run too. Calls after the connection has closed
// are ignored.
class WebSocket {
 public:
  virtual ~WebSocket() = default;
  virtual void send_text(std::string text) = 0;
  virtual void send_binary(std::string bytes) = 0;
  // Sends what is queued, then a normal close (1000).
  virtual void close() = 0;
  virtual void run(std::function<void()> task) = 0;
};

struct WebSocketCallbacks {
  std::function<void(std::string message, bool binary)> on_message;
  // Once, when the connection has closed for any reason (the client closed or went away, close()
  // completed, the server stopped); no callback runs after it.
  std::function<void()> on_closed;
};

// Decides an upgrade request (`GET` with `Upgrade: websocket`): the callbacks of the accepted
// connection `socket`, or an HTTP response that refuses it (404, 401…). Called on the connection's
// executor.
using WebSocketHandler = std::function<std::variant<WebSocketCallbacks, HttpResponse>(
    HttpRequest& request, std::shared_ptr<WebSocket> socket)>;

}  // namespace omni::server
