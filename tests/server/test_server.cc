#include "server/test_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sstream>

#include "support/subprocess.h"

namespace omni::testing {

bool CurlReply::has_header(const std::string& line) const {
  std::istringstream in(headers);
  std::string header;
  while (std::getline(in, header)) {
    if (!header.empty() && header.back() == '\r') header.pop_back();
    if (strcasecmp(header.c_str(), line.c_str()) == 0) return true;
  }
  return false;
}

CurlReply run_curl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/curl", "-sS", "-D", "/dev/stderr", "-w", "\n%{http_code}"};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessResult result = run_process(argv);
  CurlReply reply;
  reply.exit_code = result.exit_code;
  reply.stderr_text = result.err;
  reply.headers = result.err;
  size_t last = result.out.rfind('\n');
  if (last != std::string::npos) {
    reply.body = result.out.substr(0, last);
    reply.status = std::atoi(result.out.c_str() + last + 1);
  }
  return reply;
}

std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> payloads;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "SSE body does not end with a blank line: " << body.substr(pos);
      break;
    }
    std::string event = body.substr(pos, end - pos);
    if (event.rfind("data: ", 0) != 0) {
      ADD_FAILURE() << "SSE event without 'data: ': " << event;
    } else {
      payloads.push_back(event.substr(6));
    }
    pos = end + 2;
  }
  return payloads;
}

double metric_value(const std::string& metrics_text, const std::string& series) {
  std::istringstream in(metrics_text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

RawConnection::RawConnection(uint16_t port) {
  fd_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ADD_FAILURE() << "cannot connect to 127.0.0.1:" << port;
  }
}

RawConnection::~RawConnection() { close(); }

void RawConnection::send(const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      ADD_FAILURE() << "send failed";
      return;
    }
    sent += static_cast<size_t>(n);
  }
}

std::string RawConnection::read_until(const std::string& marker, std::chrono::milliseconds timeout, size_t from) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (received_.find(marker, from) == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd pfd{fd_, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left.count())) <= 0) break;
    char buffer[4096];
    ssize_t n = recv(fd_, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    received_.append(buffer, static_cast<size_t>(n));
  }
  return received_;
}

void RawConnection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void ServerTest::start(ScriptedBackendOptions backend_options,
                       const std::function<void(server::ApiServerOptions&)>& adjust) {
  backend_ = std::make_unique<ScriptedBackend>(backend_options);
  server::ApiServerOptions options;
  options.port = 0;
  options.served_model_names = {kModelName};
  options.model_path = "/models/test";
  options.max_model_len = 4096;
  options.version = "0.1.0-test";
  options.io_threads = 2;
  options.http_limits.max_body_bytes = 64 * 1024;
  options.drain_timeout = std::chrono::milliseconds(500);
  // The scripted backend answers any modality: it stands for a pipeline with text and audio stages.
  options.pipeline = "scripted";
  options.output_modalities = {"text", "audio"};
  if (adjust) adjust(options);
  server_ = std::make_unique<server::ApiServer>(options, *backend_,
                                                renderer_override_ ? renderer_override_ : &renderer_, metrics_);
  server_->start();
}

void ServerTest::TearDown() {
  if (server_) server_->stop();
  server_.reset();
  backend_.reset();
}

std::string ServerTest::url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(server_->port()) + path;
}

CurlReply ServerTest::get(const std::string& path, std::vector<std::string> extra) const {
  extra.push_back(url(path));
  return run_curl(extra);
}

CurlReply ServerTest::post(const std::string& path, const Json& body, std::vector<std::string> extra) const {
  return post_raw(path, body.dump(), std::move(extra));
}

CurlReply ServerTest::post_raw(const std::string& path, const std::string& body, std::vector<std::string> extra) const {
  std::vector<std::string> args = {"-H", "Content-Type: application/json", "--data-binary", body};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back(url(path));
  return run_curl(args);
}

}  // namespace omni::testing
