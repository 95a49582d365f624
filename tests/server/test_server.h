// The fixture of the HTTP tests: the real ApiServer on a free loopback port in front of a
// ScriptedBackend and a ByteRenderer, and helpers to drive it with curl and raw sockets.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/metrics.h"
#include "server/api_server.h"
#include "server/byte_renderer.h"
#include "server/scripted_backend.h"

namespace omni::testing {

inline constexpr const char* kModelName = "test-model";

struct CurlReply {
  int exit_code = -1;
  int status = 0;
  std::string headers;  // the response header block(s), as curl dumped them
  std::string body;
  std::string stderr_text;

  Json json() const { return Json::parse(body); }
  bool has_header(const std::string& line) const;
};

// Runs /usr/bin/curl with `args` (plus -sS, header dump and status capture).
CurlReply run_curl(const std::vector<std::string>& args);

// The `data:` payloads of an SSE body, in order; fails the test on bad framing.
std::vector<std::string> sse_payloads(const std::string& body);

// Prometheus text: the value of the series `name{labels}` (exactly as rendered), or -1.
double metric_value(const std::string& metrics_text, const std::string& series);

// A blocking loopback TCP client for raw HTTP.
class RawConnection {
 public:
  explicit RawConnection(uint16_t port);
  ~RawConnection();
  void send(const std::string& bytes);
  // Reads until `marker` has arrived at or after byte `from` of everything received (or the peer
  // closed / timeout); returns all bytes so far.
  std::string read_until(const std::string& marker, std::chrono::milliseconds timeout = std::chrono::seconds(5),
                         size_t from = 0);
  void close();

 private:
  int fd_ = -1;
  std::string received_;
};

class ServerTest : public ::testing::Test {
 protected:
  void start(ScriptedBackendOptions backend_options = {},
             const std::function<void(server::ApiServerOptions&)>& adjust = {});
  void TearDown() override;

  std::string url(const std::string& path) const;
  CurlReply get(const std::string& path, std::vector<std::string> extra = {}) const;
  CurlReply post(const std::string& path, const Json& body, std::vector<std::string> extra = {}) const;
  CurlReply post_raw(const std::string& path, const std::string& body, std::vector<std::string> extra = {}) const;

  std::unique_ptr<ScriptedBackend> backend_;
  ByteRenderer renderer_;
  // When set before start(), the server renders prompts with this instead of renderer_.
  const server::PromptRenderer* renderer_override_ = nullptr;
  MetricsRegistry metrics_;
  std::unique_ptr<server::ApiServer> server_;
};

}  // namespace omni::testing
