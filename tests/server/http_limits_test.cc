// The limits, authentication and CORS of the HTTP server, on the real ApiServer in front of the
// scripted backend: each bound answers with its status (or cuts the connection, for the
// timeouts), and after each the server still answers a good request.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "server/test_server.h"

namespace omni::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class HttpLimitsTest : public ServerTest {
 protected:
  // A request that must succeed after whatever came before it.
  void expect_still_serving() {
    CurlReply reply = post("/v1/completions", {{"prompt", {1}}, {"max_tokens", 2}});
    EXPECT_EQ(reply.status, 200) << reply.body << reply.stderr_text;
    EXPECT_EQ(get("/health").status, 200);
  }
  static void expect_error(const CurlReply& reply, int status, const Json& param, const std::string& says) {
    EXPECT_EQ(reply.status, status) << reply.body;
    Json error = Json::parse(reply.body, nullptr, false)["error"];
    EXPECT_EQ(error["code"], status) << reply.body;
    EXPECT_EQ(error["param"], param) << reply.body;
    EXPECT_NE(error["message"].get<std::string>().find(says), std::string::npos) << reply.body;
  }
  // Seconds until the server closes `connection` (which must get no answer), at most `limit`.
  static double seconds_until_closed(RawConnection& connection, std::chrono::milliseconds limit) {
    auto start = Clock::now();
    std::string received = connection.read_until("\r\n\r\n", limit);
    EXPECT_EQ(received, "") << "the server answered instead of closing";
    return std::chrono::duration<double>(Clock::now() - start).count();
  }
};

// The three bugs of issue 25: an unbounded n, a 500 for invalid UTF-8, an unknown role accepted.
TEST_F(HttpLimitsTest, ChoicesInvalidUtf8AndUnknownRolesAreBadRequests) {
  start();
  Json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}};
  Json many = chat;
  many["n"] = 100000;
  expect_error(post("/v1/chat/completions", many), 400, "n", "'n' must be in [1, 128], got 100000");
  expect_error(post("/v1/completions", {{"prompt", {1}}, {"n", 129}}), 400, "n", "in [1, 128]");
  EXPECT_TRUE(backend_->submitted().empty());
  many["n"] = 128;
  CurlReply most = post("/v1/chat/completions", many);
  EXPECT_EQ(most.status, 200) << most.body;
  EXPECT_EQ(most.json()["choices"].size(), 128u);

  // A raw 0xFF byte inside a JSON string: nlohmann refuses it, quoting it in its message.
  CurlReply utf8 = post_raw("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"ab\xff\"}]}");
  expect_error(utf8, 400, "body", "ill-formed UTF-8");
  EXPECT_NE(utf8.body.find("column 46"), std::string::npos) << utf8.body;
  expect_error(post_raw("/v1/completions", "{\"prompt\": \"\xc3\x28\"}"), 400, "body", "UTF-8");
  expect_still_serving();

  Json wizard = chat;
  wizard["messages"].push_back({{"role", "wizard"}, {"content", "x"}});
  expect_error(post("/v1/chat/completions", wizard), 400, "messages[1].role",
               "'messages[1].role' must be one of system, user, assistant, tool, developer, function, got \"wizard\"");
  for (const char* role : {"system", "developer"}) {
    Json ok = chat;
    ok["messages"].insert(ok["messages"].begin(), Json({{"role", role}, {"content", "be brief"}}));
    CurlReply reply = post("/v1/chat/completions", ok);
    EXPECT_EQ(reply.status, 200) << role << reply.body;
  }
  expect_still_serving();
}

// Found by tests/fuzz/chat_route_fuzzer: a body of 100000 nested arrays (200 KB, far under the
// body limit) in tools, chat_template_kwargs, content or stop overflowed the stack of the I/O
// thread in the recursive JSON walks after parsing, killing the server. Such a body is now a 400.
TEST_F(HttpLimitsTest, DeeplyNestedBodiesAreBadRequests) {
  namespace fs = std::filesystem;
  start({}, [](server::ApiServerOptions& o) { o.http_limits.max_body_bytes = 1024 * 1024; });
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const fs::path file = fs::temp_directory_path() / ("omni-deep-body-" + std::to_string(getpid()));
  for (
      const std::string& body :
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": )" +
           deep + "}}]}",
       R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"x": )" + deep + "}}",
       R"({"messages": [{"role": "user", "content": )" + deep + "}]}",
       R"({"messages": [{"role": "user", "content": "hi"}], "stop": )" + deep + "}"}) {
    std::ofstream(file) << body;
    expect_error(post_raw("/v1/chat/completions", "@" + file.string()), 400, "body",
                 "the request body nests arrays and objects more than 128 levels deep");
  }
  std::ofstream(file) << R"({"prompt": )" + deep + "}";
  for (const char* path : {"/v1/completions", "/tokenize", "/v1/audio/speech"}) {
    expect_error(post_raw(path, "@" + file.string()), 400, "body", "more than 128 levels deep");
  }
  fs::remove(file);
  // Brackets inside strings are text, and 128 levels are still accepted.
  Json ok = {{"messages", {{{"role", "user"}, {"content", std::string(1000, '[')}}}}, {"max_tokens", 2}};
  EXPECT_EQ(post("/v1/chat/completions", ok).status, 200);
  std::string nested = "1";
  for (int i = 0; i < 120; ++i) nested = "[" + nested + "]";
  CurlReply reply = post_raw("/v1/completions", R"({"prompt": "hi", "max_tokens": 2, "user": )" + nested + "}");
  EXPECT_EQ(reply.body.find("levels deep"), std::string::npos) << reply.body;
  expect_still_serving();
}

TEST_F(HttpLimitsTest, StopStringsAndPromptLengthHaveBounds) {
  start({}, [](server::ApiServerOptions& o) { o.max_model_len = 8; });
  expect_error(
      post("/v1/completions", {{"prompt", {1}}, {"max_tokens", 1}, {"stop", Json(std::vector<std::string>(65, "x"))}}),
      400, "stop", "at most 64 strings, got 65");
  expect_error(post("/v1/completions", {{"prompt", {1}}, {"max_tokens", 1}, {"stop", {"ok", std::string(1025, 'x')}}}),
               400, "stop[1]", "1025 bytes long; a stop string may be at most 1024 bytes");
  expect_error(post("/v1/completions", {{"prompt", {1}}, {"max_tokens", 1}, {"stop", ""}}), 400, "stop", "empty");
  EXPECT_EQ(post("/v1/completions", {{"prompt", {1}}, {"max_tokens", 1}, {"stop", std::string(1024, 'x')}}).status,
            200);

  expect_error(post("/v1/completions", {{"prompt", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}, {"max_tokens", 1}}), 400, "prompt",
               "has 10 tokens, more than this model's max_model_len of 8");
  expect_error(
      post("/v1/completions", {{"prompt", {{1}, {1, 2, 3, 4}}}, {"max_tokens", 6}}), 400, "max_tokens",
      "max_model_len is 8 tokens, but the request asks for 10 (4 in the prompt of 'prompt[1]', 6 to generate)");
  EXPECT_EQ(post("/v1/completions", {{"prompt", {1, 2, 3, 4}}, {"max_tokens", 4}}).status, 200);
  expect_error(post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "a long message"}}}}}), 400,
               "messages", "more than this model's max_model_len of 8");
  EXPECT_TRUE(backend_->submitted().size() == 2u) << "only the two good requests reached the backend";
}

TEST_F(HttpLimitsTest, OversizedBodiesAndHeadersAre413And431) {
  start({}, [](server::ApiServerOptions& o) {
    o.http_limits.max_body_bytes = 1024;
    o.http_limits.max_header_bytes = 2048;
    o.http_limits.max_header_fields = 12;
  });
  expect_error(post_raw("/v1/completions", std::string(4096, ' ')), 413, nullptr,
               "the request body exceeds the limit of 1024 bytes");
  // Refused on its Content-Length, before any of the body is sent.
  RawConnection announced(server_->port());
  announced.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n");
  std::string answer = announced.read_until("}}", 5s);
  EXPECT_EQ(answer.rfind("HTTP/1.1 413", 0), 0u) << answer;
  EXPECT_NE(answer.find("Connection: close"), std::string::npos) << answer;
  expect_still_serving();

  expect_error(get("/health", {"-H", "X-Big: " + std::string(3000, 'b')}), 431, nullptr,
               "the request line and headers exceed the limit of 2048 bytes");
  std::vector<std::string> many;
  for (int i = 0; i < 12; ++i) many.insert(many.end(), {"-H", "X-Field-" + std::to_string(i) + ": v"});
  // curl adds Host, User-Agent and Accept: 15 fields.
  expect_error(get("/health", many), 431, nullptr, "the request has 15 header fields, more than the limit of 12");
  many.resize(16);  // 8 of ours + 3 of curl's
  EXPECT_EQ(get("/health", many).status, 200);
  expect_still_serving();
}

TEST_F(HttpLimitsTest, SlowClientsAreCutAfterTheirTimeoutsWhileOthersAreServed) {
  start({}, [](server::ApiServerOptions& o) {
    o.http_limits.header_timeout = 600ms;
    o.http_limits.body_timeout = 600ms;
    o.http_limits.keep_alive_timeout = 300ms;
  });
  RawConnection slow_header(server_->port());
  slow_header.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\n");  // and nothing more
  RawConnection slow_body(server_->port());
  slow_body.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\"");
  auto start = Clock::now();
  expect_still_serving();  // while both hold their connections
  double header_cut = seconds_until_closed(slow_header, 5s);
  double body_cut = seconds_until_closed(slow_body, 5s) + header_cut;
  double since = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GT(since, 0.5);
  EXPECT_LT(header_cut, 3.0);
  EXPECT_LT(body_cut, 3.0);

  // Idle keep-alive: the connection is closed after the keep-alive timeout, not the header one.
  RawConnection idle(server_->port());
  idle.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string first = idle.read_until("healthy\"}");
  ASSERT_NE(first.find("200 OK"), std::string::npos) << first;
  auto idle_start = Clock::now();
  std::string rest = idle.read_until("never arrives", 5s, first.size());
  double idle_cut = std::chrono::duration<double>(Clock::now() - idle_start).count();
  EXPECT_EQ(rest, first);
  EXPECT_GT(idle_cut, 0.2);
  EXPECT_LT(idle_cut, 0.55) << "closed by the header timeout (0.6 s) instead of the keep-alive one (0.3 s)";

  // Within the keep-alive timeout the connection serves the next request.
  RawConnection reused(server_->port());
  reused.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string one = reused.read_until("healthy\"}");
  std::this_thread::sleep_for(100ms);
  reused.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string two = reused.read_until("healthy\"}", 2s, one.size());
  EXPECT_NE(two.find("healthy\"}", one.size()), std::string::npos) << two;
  expect_still_serving();
}

TEST_F(HttpLimitsTest, ConnectionsPastTheCapAre503WithRetryAfter) {
  start({}, [](server::ApiServerOptions& o) { o.http_limits.max_connections = 2; });
  auto first = std::make_unique<RawConnection>(server_->port());
  RawConnection second(server_->port());
  first->send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_NE(first->read_until("healthy\"}").find("200 OK"), std::string::npos);

  RawConnection third(server_->port());
  std::string refused = third.read_until("}}", 5s);
  EXPECT_EQ(refused.rfind("HTTP/1.1 503", 0), 0u) << refused;
  EXPECT_NE(refused.find("Retry-After: 1\r\n"), std::string::npos) << refused;
  EXPECT_NE(refused.find("the server is at its limit of 2 open connections"), std::string::npos) << refused;
  EXPECT_NE(refused.find("Connection: close"), std::string::npos) << refused;

  // Once one closes, a new client is served again.
  first.reset();
  CurlReply reply;
  for (auto deadline = Clock::now() + 3s; Clock::now() < deadline;) {
    reply = get("/health");
    if (reply.status == 200) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(reply.status, 200) << reply.body;
}

TEST_F(HttpLimitsTest, RequestsPastTheInflightBoundAre503WithRetryAfter) {
  start({.token_delay = 20ms}, [](server::ApiServerOptions& o) { o.max_inflight_requests = 2; });
  std::thread busy([this] { post("/v1/completions", {{"prompt", {{1}, {2}}}, {"max_tokens", 25}}); });
  for (int i = 0; i < 500 && backend_->live_requests() < 2; ++i) std::this_thread::sleep_for(2ms);
  ASSERT_EQ(backend_->live_requests(), 2);
  CurlReply refused = post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "x"}}}}});
  expect_error(refused, 503, nullptr, "the server is at its limit of 2 requests in flight; retry later");
  EXPECT_TRUE(refused.has_header("Retry-After: 1")) << refused.headers;
  expect_error(post("/v1/completions", {{"prompt", {{1}, {2}, {3}}}}), 400, nullptr,
               "needs 3 generation requests at once, more than this server ever takes (2)");
  EXPECT_EQ(get("/health").status, 200);
  busy.join();
  ASSERT_TRUE(backend_->wait_idle(5s));
  expect_still_serving();
  EXPECT_EQ(backend_->submitted().size(), 3u) << "refused requests never reached the backend";
}

TEST_F(HttpLimitsTest, SeveralApiKeysAndCorsPreflightsWithoutAKey) {
  start({}, [](server::ApiServerOptions& o) {
    o.api_keys = {"key-one", "key-two"};
    o.cors.allowed_origins = {"http://app.example"};
  });
  Json body = {{"prompt", {1}}, {"max_tokens", 1}};
  CurlReply missing = post("/v1/completions", body);
  expect_error(missing, 401, nullptr, "missing API key");
  EXPECT_TRUE(missing.has_header("WWW-Authenticate: Bearer"));
  expect_error(post("/v1/completions", body, {"-H", "Authorization: Bearer key-three"}), 401, nullptr,
               "invalid API key");
  EXPECT_EQ(post("/v1/completions", body, {"-H", "Authorization: Bearer key-one"}).status, 200);
  EXPECT_EQ(post("/v1/completions", body, {"-H", "Authorization: bearer key-two"}).status, 200);
  EXPECT_EQ(post("/tokenize", {{"prompt", "hi"}}).status, 401);
  for (const char* open : {"/health", "/version", "/metrics"}) EXPECT_EQ(get(open).status, 200) << open;
  EXPECT_EQ(get("/nothing-here").status, 404);

  CurlReply preflight =
      run_curl({"-X", "OPTIONS", "-H", "Origin: http://app.example", "-H", "Access-Control-Request-Method: POST", "-H",
                "Access-Control-Request-Headers: authorization, content-type", url("/v1/chat/completions")});
  EXPECT_EQ(preflight.status, 200) << preflight.body;
  EXPECT_EQ(preflight.body, "OK");
  EXPECT_TRUE(preflight.has_header("Access-Control-Allow-Origin: http://app.example")) << preflight.headers;
  EXPECT_TRUE(preflight.has_header("Access-Control-Allow-Headers: authorization, content-type")) << preflight.headers;
  CurlReply stranger = run_curl({"-X", "OPTIONS", "-H", "Origin: http://evil.example", "-H",
                                 "Access-Control-Request-Method: POST", url("/v1/chat/completions")});
  EXPECT_EQ(stranger.status, 400);
  EXPECT_EQ(stranger.body, "Disallowed CORS origin");

  // The actual request: granted headers on the answer, streamed or not, and on a 401 too.
  CurlReply granted = post("/v1/completions", {{"prompt", {1}}, {"max_tokens", 2}, {"stream", true}},
                           {"-H", "Origin: http://app.example", "-H", "Authorization: Bearer key-one"});
  EXPECT_EQ(granted.status, 200);
  EXPECT_TRUE(granted.has_header("Access-Control-Allow-Origin: http://app.example")) << granted.headers;
  EXPECT_TRUE(post("/v1/completions", body, {"-H", "Origin: http://app.example"})
                  .has_header("Access-Control-Allow-Origin: http://app.example"));
  EXPECT_FALSE(
      post("/v1/completions", body, {"-H", "Origin: http://evil.example", "-H", "Authorization: Bearer key-one"})
          .has_header("Access-Control-Allow-Origin: http://evil.example"));
}

// --host 127.0.0.1 listens there only: the same port on another loopback address refuses.
TEST_F(HttpLimitsTest, TheHostAddressIsTheOnlyOneListenedOn) {
  start({}, [](server::ApiServerOptions& o) { o.host = "127.0.0.1"; });
  auto connects = [&](const char* address) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(server_->port());
    inet_pton(AF_INET, address, &to.sin_addr);
    bool ok = connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0;
    ::close(fd);
    return ok;
  };
  EXPECT_TRUE(connects("127.0.0.1"));
  EXPECT_FALSE(connects("127.0.0.2"));
  TearDown();
  start({}, [](server::ApiServerOptions& o) { o.host = "localhost"; });  // a name is resolved
  EXPECT_TRUE(connects("127.0.0.1"));
}

}  // namespace
}  // namespace omni::testing
