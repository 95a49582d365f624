// The HTTP/1.1 transport: an asynchronous keep-alive server on Boost.Asio/Beast with N I/O threads.
// It parses requests, enforces the HttpLimits, hands each request to one HttpHandler and writes
// what the handler answers (whole responses or chunked streams). It knows nothing of routes or
// of the OpenAI protocol.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "server/http.h"

namespace omni::server {

// What one client may cost the server: each bound is enforced before the request reaches a handler,
// and a client past it gets an error (or, for the timeouts, its connection closed) while every other
// connection is unaffected. docs/reliability.md lists them with their flags.
struct HttpLimits {
  size_t max_body_bytes = size_t{64} * 1024 * 1024;  // a larger body: 413, before it is read
  // The request line and header fields together (h11's "incomplete event"): larger, 431.
  size_t max_header_bytes = size_t{4} * 1024 * 1024;
  size_t max_header_fields = 256;  // more header fields: 431
  // From a connection's first byte (or its acceptance) to the end of a request's header: a client
  // that takes longer is disconnected (slow-header clients hold a connection open for nothing).
  std::chrono::milliseconds header_timeout{std::chrono::seconds(10)};
  // From the end of the header to the end of the body.
  std::chrono::milliseconds body_timeout{std::chrono::seconds(60)};
  // An idle keep-alive connection is closed after this long without the first byte of a new request.
  std::chrono::milliseconds keep_alive_timeout{std::chrono::seconds(5)};
  // Connections open at once; one more is answered 503 (with Retry-After) and closed. 0: no cap.
  size_t max_connections = 1000;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";  // an IP address, or a host name (its first IPv4 address, else its first)
  uint16_t port = 0;               // 0 picks a free port; port() tells which
  int io_threads = 4;
  HttpLimits limits;
  // stop() lets in-flight exchanges finish for this long, then aborts them.
  std::chrono::milliseconds drain_timeout{std::chrono::seconds(5)};
  // SO_REUSEPORT: other processes listening on the same address share its connections (the
  // kernel spreads new connections over them).
  bool reuse_port = false;
};

// Renders a transport-level failure (413 body too large, 431 header too large, 503 too many
// connections, 400 unparsable request, 500 handler threw) in the protocol's error shape.
using HttpErrorRenderer = std::function<HttpResponse(int status, const std::string& message)>;

// Threads: start() and stop() from one controlling thread; the handler runs on the I/O threads.
// Errors: start() throws omni::Error(kUnavailable) naming host:port when it cannot listen.
class HttpServer {
 public:
  // `websocket_handler` decides upgrade requests; without one they go to `handler` like any request.
  HttpServer(HttpServerOptions options, HttpHandler handler, HttpErrorRenderer error_renderer,
             WebSocketHandler websocket_handler = {});
  ~HttpServer();  // stop()s if still running
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void start();
  uint16_t port() const;
  // Graceful: stops accepting, closes idle connections, lets in-flight exchanges finish within
  // drain_timeout, then fires their on_disconnect callbacks (handlers abort their work and end
  // their streams), waits briefly for that, closes every connection and joins the I/O threads.
  void stop();

  struct Impl;  // defined in http_server.cc, shared with the connections

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace omni::server
