// `omnistage serve`'s limits, API keys and CORS end to end: the real binary on the qwen3 demo
// checkpoint, started with small limits so that each is reached in a fraction of a second, driven
// with curl and raw sockets. After every refused request a good one is still answered.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/json.h"
#include "integration/serve_process.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace omni::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A blocking loopback client for the requests curl will not send (stalled, unfinished).
class Socket {
 public:
  explicit Socket(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) ADD_FAILURE() << "connect failed";
  }
  ~Socket() { ::close(fd_); }
  void send(const std::string& bytes) {
    EXPECT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
  }
  // Reads until `marker` arrived, the peer closed or `timeout` passed; sets closed() on close.
  std::string read_until(const std::string& marker, std::chrono::milliseconds timeout) {
    for (auto deadline = Clock::now() + timeout; received_.find(marker) == std::string::npos && !closed_;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd pfd{fd_, POLLIN, 0};
      if (left <= 0 || poll(&pfd, 1, static_cast<int>(left)) <= 0) break;
      char buffer[4096];
      ssize_t n = recv(fd_, buffer, sizeof buffer, 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      received_.append(buffer, static_cast<size_t>(n));
    }
    return received_;
  }
  bool closed() const { return closed_; }

 private:
  int fd_;
  std::string received_;
  bool closed_ = false;
};

Json error_of(const HttpResult& r) { return Json::parse(r.body, nullptr, false)["error"]; }

inline constexpr char kArch[] = "qwen3";
inline constexpr const char* kSecondKey = "second-key";

class ServeLimitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    ProcessResult made =
        run_process({OMNISTAGE_BINARY, "demo-model", "--arch", kArch, "--out", (dir_->path() / "model").string()});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    server_ = std::make_unique<ServeProcess>(dir_->path() / "model", dir_->path() / "serve.log",
                                             std::vector<std::string>{"--api-key",
                                                                      kApiKey,
                                                                      kSecondKey,
                                                                      "--allowed-origins",
                                                                      R"(["http://app.example"])",
                                                                      "--max-request-body-bytes",
                                                                      "65536",
                                                                      "--h11-max-incomplete-event-size",
                                                                      "4096",
                                                                      "--h11-max-header-count",
                                                                      "20",
                                                                      "--header-read-timeout",
                                                                      "1",
                                                                      "--timeout-keep-alive",
                                                                      "1",
                                                                      "--max-connections",
                                                                      "12",
                                                                      "--max-inflight-requests",
                                                                      "2",
                                                                      "--max-model-len",
                                                                      "2048"},
                                             std::vector<std::string>{}, false);
  }
  static void TearDownTestSuite() {
    server_.reset();
    dir_.reset();
  }
  void SetUp() override { ASSERT_GT(server_->port(), 0) << "the server is not running"; }

  static Json chat(const std::string& content) {
    return {{"model", kModelName},
            {"messages", {{{"role", "user"}, {"content", content}}}},
            {"max_tokens", 2},
            {"temperature", 0}};
  }
  static void expect_still_serving() {
    HttpResult r = curl(*server_, "/v1/chat/completions", chat("Hi").dump());
    EXPECT_EQ(r.status, 200) << r.body;
  }
  // curl without the API key.
  static HttpResult bare(const std::string& path, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {"/usr/bin/curl", "-sS", "--max-time", "20", "-w", "\n%{http_code}"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(server_->url(path));
    ProcessResult result = run_process(argv);
    HttpResult out;
    size_t split = result.out.rfind('\n');
    if (split == std::string::npos) return out;
    out.body = result.out.substr(0, split);
    out.status = std::atoi(result.out.c_str() + split + 1);
    return out;
  }

  static inline std::unique_ptr<TempDir> dir_;
  static inline std::unique_ptr<ServeProcess> server_;
};

TEST_F(ServeLimitsTest, TheThreeBugsOfIssue25AreBadRequests) {
  Json many = chat("Hi");
  many["n"] = 100000;
  HttpResult r = curl(*server_, "/v1/chat/completions", many.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(error_of(r)["param"], "n");
  EXPECT_EQ(error_of(r)["message"], "'n' must be in [1, 128], got 100000");
  expect_still_serving();

  r = curl(*server_, "/v1/chat/completions",
           std::string(R"({"model": "demo", "messages": [{"role": "user", "content": "caf)") + "\xe9" + R"("}]})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(error_of(r)["param"], "body");
  EXPECT_NE(error_of(r)["message"].get<std::string>().find("ill-formed UTF-8"), std::string::npos) << r.body;
  expect_still_serving();

  Json wizard = chat("Hi");
  wizard["messages"][0]["role"] = "wizard";
  r = curl(*server_, "/v1/chat/completions", wizard.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(error_of(r)["param"], "messages[0].role");
  EXPECT_NE(error_of(r)["message"].get<std::string>().find("system, user, assistant, tool, developer, function"),
            std::string::npos);
  expect_still_serving();
}

TEST_F(ServeLimitsTest, PromptsLongerThanMaxModelLenNameBothNumbers) {
  Json completion = {{"model", kModelName}, {"prompt", Json(std::vector<int>(3000, 9707))}, {"max_tokens", 1}};
  HttpResult r = curl(*server_, "/v1/completions", completion.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(error_of(r)["message"],
            "the prompt of 'prompt' has 3000 tokens, more than this model's max_model_len of 2048");
  completion["prompt"] = Json(std::vector<int>(1000, 9707));
  completion["max_tokens"] = 1100;
  r = curl(*server_, "/v1/completions", completion.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(error_of(r)["param"], "max_tokens");
  expect_still_serving();
}

TEST_F(ServeLimitsTest, ApiKeysGuardTheApiAndLeaveHealthAndMetricsOpen) {
  HttpResult missing = bare("/v1/models");
  EXPECT_EQ(missing.status, 401);
  EXPECT_EQ(error_of(missing)["code"], 401) << missing.body;
  EXPECT_EQ(bare("/v1/models", {"-H", "Authorization: Bearer wrong"}).status, 401);
  EXPECT_EQ(bare("/v1/models", {"-H", std::string("Authorization: Bearer ") + kApiKey}).status, 200);
  EXPECT_EQ(bare("/v1/models", {"-H", std::string("Authorization: Bearer ") + kSecondKey}).status, 200);
  for (const char* open : {"/health", "/metrics", "/version"}) EXPECT_EQ(bare(open).status, 200) << open;
}

TEST_F(ServeLimitsTest, CorsPreflightNeedsNoKeyAndNamesTheAllowedOrigin) {
  ProcessResult preflight =
      run_process({"/usr/bin/curl", "-sS", "-i", "-X", "OPTIONS", "-H", "Origin: http://app.example", "-H",
                   "Access-Control-Request-Method: POST", "-H", "Access-Control-Request-Headers: authorization",
                   server_->url("/v1/chat/completions")});
  EXPECT_EQ(preflight.out.rfind("HTTP/1.1 200", 0), 0u) << preflight.out;
  EXPECT_NE(preflight.out.find("Access-Control-Allow-Origin: http://app.example"), std::string::npos) << preflight.out;
  EXPECT_NE(preflight.out.find("Access-Control-Allow-Headers: authorization"), std::string::npos) << preflight.out;
  HttpResult stranger = bare("/v1/chat/completions", {"-X", "OPTIONS", "-H", "Origin: http://evil.example", "-H",
                                                      "Access-Control-Request-Method: POST"});
  EXPECT_EQ(stranger.status, 400);
  EXPECT_EQ(stranger.body, "Disallowed CORS origin");
  expect_still_serving();
}

TEST_F(ServeLimitsTest, OversizedBodiesAndHeadersAre413And431) {
  HttpResult r = curl(*server_, "/v1/chat/completions", chat(std::string(100000, 'a')).dump());
  EXPECT_EQ(r.status, 413) << r.body;
  EXPECT_EQ(error_of(r)["message"], "the request body exceeds the limit of 65536 bytes");
  expect_still_serving();

  r = curl(*server_, "/health", std::nullopt, {"-H", "X-Big: " + std::string(5000, 'b')});
  EXPECT_EQ(r.status, 431) << r.body;
  EXPECT_EQ(error_of(r)["code"], 431);
  std::vector<std::string> many;
  for (int i = 0; i < 20; ++i) many.insert(many.end(), {"-H", "X-Field-" + std::to_string(i) + ": v"});
  r = curl(*server_, "/health", std::nullopt, many);
  EXPECT_EQ(r.status, 431) << r.body;
  EXPECT_NE(error_of(r)["message"].get<std::string>().find("more than the limit of 20"), std::string::npos) << r.body;
  expect_still_serving();
}

TEST_F(ServeLimitsTest, ASlowHeaderClientIsCutAfterTheHeaderTimeout) {
  Socket slow(server_->port());
  slow.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n");
  auto start = Clock::now();
  expect_still_serving();
  std::string received = slow.read_until("\r\n\r\n", 5s);
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_TRUE(slow.closed());
  EXPECT_EQ(received, "");
  EXPECT_GT(seconds, 0.8);
  EXPECT_LT(seconds, 3.0);
  expect_still_serving();
}

TEST_F(ServeLimitsTest, ConnectionsPastTheCapAre503WithRetryAfter) {
  std::vector<std::unique_ptr<Socket>> held;
  for (int i = 0; i < 12; ++i) held.push_back(std::make_unique<Socket>(server_->port()));
  Socket refused(server_->port());
  std::string answer = refused.read_until("}}", 5s);
  EXPECT_EQ(answer.rfind("HTTP/1.1 503", 0), 0u) << answer;
  EXPECT_NE(answer.find("Retry-After: 1\r\n"), std::string::npos) << answer;
  EXPECT_NE(answer.find("limit of 12 open connections"), std::string::npos) << answer;
  held.clear();
  HttpResult r;
  for (auto deadline = Clock::now() + 3s; Clock::now() < deadline && r.status != 200;) {
    r = curl(*server_, "/v1/chat/completions", chat("Hi").dump());
    if (r.status != 200) std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(ServeLimitsTest, RequestsPastTheInflightBoundAre503WithRetryAfter) {
  Json streamed = chat("Hi");
  streamed["max_tokens"] = 2000;
  streamed["ignore_eos"] = true;
  streamed["stream"] = true;
  const std::string body = streamed.dump();
  const std::string request =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + std::string(kApiKey) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  {
    Socket one(server_->port());
    Socket two(server_->port());
    one.send(request);
    two.send(request);
    ASSERT_NE(one.read_until("data: ", 10s).find("data: "), std::string::npos);
    ASSERT_NE(two.read_until("data: ", 10s).find("data: "), std::string::npos);
    ProcessResult refused = run_process(
        {"/usr/bin/curl", "-sS", "-i", "-H", std::string("Authorization: Bearer ") + kApiKey, "-H",
         "Content-Type: application/json", "--data-binary", chat("Hi").dump(), server_->url("/v1/chat/completions")});
    EXPECT_EQ(refused.out.rfind("HTTP/1.1 503", 0), 0u) << refused.out;
    EXPECT_NE(refused.out.find("Retry-After: 1\r\n"), std::string::npos) << refused.out;
    EXPECT_NE(refused.out.find("limit of 2 requests in flight"), std::string::npos) << refused.out;
  }  // both clients go away: their requests are aborted and give back their places
  HttpResult r;
  for (auto deadline = Clock::now() + 5s; Clock::now() < deadline && r.status != 200;) {
    r = curl(*server_, "/v1/chat/completions", chat("Hi").dump());
    if (r.status != 200) std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(r.status, 200) << r.body;
}

// The server was started with --host 127.0.0.1: another loopback address has nothing listening.
TEST_F(ServeLimitsTest, TheHostFlagIsTheOnlyAddressListenedOn) {
  auto connects = [](const char* address) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(server_->port()));
    inet_pton(AF_INET, address, &to.sin_addr);
    const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0;
    ::close(fd);
    return ok;
  };
  EXPECT_TRUE(connects("127.0.0.1"));
  EXPECT_FALSE(connects("127.0.0.2"));
}

// The keys from the environment: OMNISTAGE_API_KEY wins over VLLM_API_KEY, which works alone too.
TEST(ServeApiKeyEnvironment, KeysComeFromOmnistageApiKeyElseVllmApiKey) {
  TempDir dir;
  ASSERT_EQ(run_process({OMNISTAGE_BINARY, "demo-model", "--arch", kArch, "--out", (dir.path() / "model").string()})
                .exit_code,
            0);
  auto status = [](const ServeProcess& server, const std::string& key) {
    return run_process({"/usr/bin/curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H",
                        "Authorization: Bearer " + key, server.url("/v1/models")})
        .out;
  };
  {
    ServeProcess both(dir.path() / "model", dir.path() / "both.log", {},
                      {"OMNISTAGE_API_KEY=omni-key", "VLLM_API_KEY=vllm-key"}, false);
    EXPECT_EQ(status(both, "omni-key"), "200");
    EXPECT_EQ(status(both, "vllm-key"), "401");
  }
  ServeProcess vllm(dir.path() / "model", dir.path() / "vllm.log", {}, {"VLLM_API_KEY=vllm-key"}, false);
  EXPECT_EQ(status(vllm, "vllm-key"), "200");
  EXPECT_EQ(status(vllm, "other"), "401");
}

// A KV cache that holds exactly one sequence of max_model_len (4 blocks of 16 tokens): requests
// that together need far more are preempted and resumed in turn, every one completes, and nothing
// hangs; one that alone could never fit is refused naming both numbers.
TEST(ServeKvCapacity, RequestsPastTheKvCapacityArePreemptedAndOneThatNeverFitsIsRefused) {
  TempDir dir;
  ASSERT_EQ(run_process({OMNISTAGE_BINARY, "demo-model", "--arch", kArch, "--out", (dir.path() / "model").string()})
                .exit_code,
            0);
  ServeProcess server(dir.path() / "model", dir.path() / "serve.log",
                      {"--num-gpu-blocks-override", "4", "--max-model-len", "64"}, {}, true);
  ASSERT_GT(server.port(), 0);
  std::vector<HttpResult> results(8);
  std::vector<std::thread> clients;
  const auto started = Clock::now();
  for (size_t i = 0; i < results.size(); ++i) {
    clients.emplace_back([&, i] {
      Json body = {{"model", kModelName}, {"prompt", Json(std::vector<int>(20, 9707 + static_cast<int>(i)))},
                   {"max_tokens", 44},    {"ignore_eos", true},
                   {"n", 2}};
      results[i] = curl(server, "/v1/completions", body.dump(), {"--max-time", "60"});
    });
  }
  for (std::thread& client : clients) client.join();
  for (const HttpResult& r : results) {
    ASSERT_EQ(r.status, 200) << r.body;
    const Json completion = Json::parse(r.body);
    EXPECT_EQ(completion["usage"]["completion_tokens"], 2 * 44) << r.body;
  }
  // 16 sequences of 64 tokens need 64 blocks at once; the cache has 4: they ran in turn.
  EXPECT_LT(Clock::now() - started, 60s);

  Json too_long = {{"model", kModelName}, {"prompt", Json(std::vector<int>(40, 9707))}, {"max_tokens", 30}};
  HttpResult refused = curl(server, "/v1/completions", too_long.dump());
  EXPECT_EQ(refused.status, 400) << refused.body;
  const std::string message = error_of(refused)["message"];
  EXPECT_NE(message.find("40"), std::string::npos) << message;
  EXPECT_NE(message.find("64"), std::string::npos) << message;
}

}  // namespace
}  // namespace omni::testing
