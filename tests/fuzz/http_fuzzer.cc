// libFuzzer target for the HTTP transport (server/http_server.cc): the input is what a client
// sends on one loopback connection to a running HttpServer (request lines, headers, chunked or
// sized bodies, pipelined requests, Expect: 100-continue), after which the client half-closes and
// reads until the server closes. The handler answers /stream… with a chunked stream and anything
// else with a plain response; the limits are small so that every one of them is reachable.
//
// What must hold: the server closes the connection within a few seconds of the client's end of
// input; whatever it sends is HTTP/1.1 responses; a transport error is a 4xx (never 500); and the
// server keeps serving (the next input gets a fresh connection accepted).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "fuzz_guard.h"
#include "server/http_server.h"

namespace {

constexpr const char* kTarget = "http_fuzzer";

omni::server::HttpResponse plain(int status, const std::string& body) {
  omni::server::HttpResponse response;
  response.status = status;
  response.content_type = "text/plain";
  response.body = body;
  return response;
}

void handle(omni::server::HttpRequest& request, std::shared_ptr<omni::server::Responder> responder) {
  if (request.path.starts_with("/stream")) {
    responder->start_stream(200, "text/event-stream");
    for (int i = 0; i < 3; ++i) {
      responder->run([responder, i] { responder->write("data: " + std::to_string(i) + "\n\n"); });
    }
    responder->run([responder] { responder->end_stream(); });
    return;
  }
  // No spaces: the status-line check below must not find one inside a body.
  responder->respond(plain(200, request.method + "|" + request.path + "|" + std::to_string(request.body.size()) + "|" +
                                    std::to_string(request.headers.size())));
}

omni::server::HttpServer& server() {
  static omni::server::HttpServer* instance = [] {
    omni::server::HttpServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.io_threads = 1;
    options.limits.max_body_bytes = 4096;
    options.limits.max_header_bytes = 2048;
    options.limits.max_header_fields = 16;
    options.limits.header_timeout = std::chrono::seconds(2);
    options.limits.body_timeout = std::chrono::seconds(2);
    options.limits.keep_alive_timeout = std::chrono::seconds(2);
    options.limits.max_connections = 64;
    auto* s = new omni::server::HttpServer(
        options, handle, [](int status, const std::string& message) { return plain(status, message); });
    s->start();
    return s;
  }();
  return *instance;
}

int connect_to(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  omni::fuzz::require(fd >= 0, kTarget, "socket() failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  omni::fuzz::require(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0, kTarget,
                      "the server no longer accepts connections");
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  return fd;
}

void check_responses(const std::string& received) {
  // Every response begins with a status line; 5xx would be the server's own failure.
  size_t at = 0;
  while ((at = received.find("HTTP/1.1 ", at)) != std::string::npos) {
    if (at + 12 > received.size()) break;
    const int status = std::atoi(received.substr(at + 9, 3).c_str());
    if (status >= 500 || status < 100) {
      std::fprintf(stderr, "%s: the server answered %d:\n%s\n", kTarget, status, received.c_str());
      std::abort();
    }
    at += 12;
  }
  if (!received.empty() && !received.starts_with("HTTP/1.1 ")) {
    std::fprintf(stderr, "%s: the server sent something that is not an HTTP/1.1 response:\n%s\n", kTarget,
                 received.c_str());
    std::abort();
  }
}

void run(const uint8_t* data, size_t size) {
  const int fd = connect_to(server().port());
  size_t sent = 0;
  while (sent < size) {
    ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server has closed (an error answered early): fine
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string received;
  char buffer[4096];
  while (true) {
    ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == ECONNRESET) break;
      // libFuzzer's -timeout timer is SIGALRM, and a recv with SO_RCVTIMEO is never restarted
      // after a signal: EINTR is the timer, not the server.
      if (errno == EINTR) continue;
      std::fprintf(stderr, "%s: the server did not close the connection within 10 s of the client's end\n", kTarget);
      std::abort();
    }
    received.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  check_responses(received);
}

}  // namespace

// The set-up (loading the tokenizer, starting a server) before the first input, outside its timeout.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)server();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  omni::fuzz::expect_only_omni_errors(kTarget, [&] { run(data, size); });
  return 0;
}
