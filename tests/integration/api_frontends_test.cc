// `omnistage serve --api-server-count N` end to end on the demo checkpoints: N frontend processes
// on one port in front of one set of stage processes answer like one frontend, all of them take
// requests, a frontend killed with SIGKILL fails only its own requests and is started again, the
// process-local routes answer 409; and sleep mode on the CPU (--enable-sleep-mode, one frontend):
// the stage worker's resident memory drops, requests get 503 naming the stage, and the outputs
// after waking up are the outputs before.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <set>
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
namespace fs = std::filesystem;

constexpr int kConcurrent = 64;
constexpr int kPrompts = 8;

struct Reply {
  int status = 0;
  std::string body;
  int frontend = -1;  // x-omnistage-frontend, -1 when absent
  int curl_exit = 0;
};

// curl with the API key, the response headers read from its stderr.
Reply request(const ServeProcess& server, const std::string& path, const std::optional<std::string>& body,
              const std::string& method = "", int max_time = 60) {
  std::vector<std::string> argv = {"/usr/bin/curl",
                                   "-sS",
                                   "-N",
                                   "--max-time",
                                   std::to_string(max_time),
                                   "-D",
                                   "/dev/stderr",
                                   "-w",
                                   "\n%{http_code}",
                                   "-H",
                                   std::string("Authorization: Bearer ") + kApiKey};
  if (!method.empty()) argv.insert(argv.end(), {"-X", method});
  if (body) argv.insert(argv.end(), {"-H", "Content-Type: application/json", "--data-binary", *body});
  argv.push_back(server.url(path));
  ProcessResult result = run_process(argv);
  Reply reply;
  reply.curl_exit = result.exit_code;
  const size_t split = result.out.rfind('\n');
  if (split != std::string::npos) {
    reply.body = result.out.substr(0, split);
    reply.status = std::atoi(result.out.c_str() + split + 1);
  }
  std::smatch m;
  if (std::regex_search(result.err, m, std::regex(R"(x-omnistage-frontend: (\d+))"))) reply.frontend = std::stoi(m[1]);
  return reply;
}

std::string completion_body(int prompt, int max_tokens, bool stream = false) {
  return Json({{"model", kModelName},
               {"prompt", "Request " + std::to_string(prompt) + ": tell me about frontends and stages."},
               {"max_tokens", max_tokens},
               {"temperature", 0},
               {"ignore_eos", true},
               {"stream", stream}})
      .dump();
}

std::string completion_text(const Reply& reply) {
  if (reply.status != 200) return "<status " + std::to_string(reply.status) + ": " + reply.body + ">";
  return Json::parse(reply.body)["choices"][0]["text"].get<std::string>();
}

std::string streamed_text(const Reply& reply) {
  std::string text;
  for (const Json& event : sse_events(reply.body)) {
    if (event.contains("choices") && !event["choices"].empty()) text += event["choices"][0]["text"].get<std::string>();
  }
  return text;
}

std::string cmdline(pid_t pid) {
  std::string text = read_file("/proc/" + std::to_string(pid) + "/cmdline");
  for (char& c : text) c = c == '\0' ? ' ' : c;
  return text;
}

// The launcher's children that are API frontends (`serve`) or stage workers (`stage-worker`).
std::vector<pid_t> children_running(pid_t parent, const std::string& subcommand) {
  std::vector<pid_t> out;
  for (pid_t pid : children_of(parent)) {
    if (cmdline(pid).find(" " + subcommand + " ") != std::string::npos) out.push_back(pid);
  }
  std::sort(out.begin(), out.end());
  return out;
}

int64_t resident_bytes(pid_t pid) {
  std::istringstream statm(read_file("/proc/" + std::to_string(pid) + "/statm"));
  int64_t size = 0;
  int64_t resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// The value of the series `name{labels}` in a /metrics text, or -1.
double series_value(const std::string& metrics, const std::string& series) {
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with(series + " ")) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

// `count` requests at once, each on its own connection; the replies in order.
template <typename Make>
std::vector<Reply> concurrently(int count, Make make) {
  std::vector<Reply> replies(count);
  std::vector<std::thread> clients;
  for (int i = 0; i < count; ++i) clients.emplace_back([&, i] { replies[i] = make(i); });
  for (std::thread& t : clients) t.join();
  return replies;
}

class ApiFrontendsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    for (const char* arch : {"qwen3", "qwen3_tts"}) {
      ProcessResult made =
          run_process({OMNISTAGE_BINARY, "demo-model", "--arch", arch, "--out", (dir_->path() / arch).string()});
      ASSERT_EQ(made.exit_code, 0) << made.err;
    }
  }
  static void TearDownTestSuite() { dir_.reset(); }

  static std::unique_ptr<ServeProcess> serve(const std::string& arch, const std::string& log,
                                             std::vector<std::string> extra) {
    auto server = std::make_unique<ServeProcess>(dir_->path() / arch, dir_->path() / log, std::move(extra));
    EXPECT_GT(server->port(), 0) << server->log();
    return server;
  }

  static inline std::unique_ptr<TempDir> dir_;
};

// The 64 replies equal the one-frontend references and every frontend answered some of them, by
// the response header and by the merged /metrics.
void expect_like_one_frontend(const ServeProcess& server, int frontends, const std::vector<std::string>& references,
                              const std::vector<Reply>& replies,
                              const std::function<std::string(const Reply&)>& output) {
  std::map<int, int> per_frontend;
  for (int i = 0; i < static_cast<int>(replies.size()); ++i) {
    EXPECT_EQ(replies[i].status, 200) << replies[i].body;
    EXPECT_TRUE(output(replies[i]) == references[i % references.size()]) << "request " << i << " differs";
    per_frontend[replies[i].frontend]++;
  }
  for (int f = 0; f < frontends; ++f) EXPECT_GT(per_frontend[f], 0) << "frontend " << f << " served no request";
  EXPECT_EQ(per_frontend.size(), static_cast<size_t>(frontends)) << "replies from an unknown frontend";
  std::this_thread::sleep_for(600ms);  // every frontend's metrics snapshot is newer than the replies
  Reply metrics = request(server, "/metrics", std::nullopt);
  ASSERT_EQ(metrics.status, 200);
  for (int f = 0; f < frontends; ++f) {
    EXPECT_GE(series_value(metrics.body, "omnistage:api_server_requests_total{frontend=\"" + std::to_string(f) + "\"}"),
              per_frontend[f])
        << metrics.body;
  }
  size_t types = 0;
  for (size_t at = 0; (at = metrics.body.find("# TYPE omnistage:api_server_requests_total ", at)) != std::string::npos;
       ++at) {
    ++types;
  }
  EXPECT_EQ(types, 1u) << "each family once in the merged exposition";
}

TEST_F(ApiFrontendsTest, Qwen3TwoAndFourFrontendsAnswerLikeOne) {
  std::vector<std::string> references;
  {
    auto one = serve("qwen3", "qwen3_n1.log", {});
    ASSERT_GT(one->port(), 0);
    for (int p = 0; p < kPrompts; ++p)
      references.push_back(completion_text(request(*one, "/v1/completions", completion_body(p, 8))));
    EXPECT_EQ(request(*one, "/v1/completions", completion_body(0, 8)).frontend, -1) << "no frontend header with one";
  }
  for (int n : {2, 4}) {
    SCOPED_TRACE("--api-server-count " + std::to_string(n));
    auto server = serve("qwen3", "qwen3_n" + std::to_string(n) + ".log", {"--api-server-count", std::to_string(n)});
    ASSERT_GT(server->port(), 0);
    EXPECT_EQ(children_running(server->pid(), "serve").size(), static_cast<size_t>(n)) << server->log();
    EXPECT_EQ(children_running(server->pid(), "stage-worker").size(), 1u) << "the stage runs once";
    auto replies = concurrently(kConcurrent, [&](int i) {
      return request(*server, "/v1/completions", completion_body(i % kPrompts, 8, i % 2 == 1));
    });
    expect_like_one_frontend(*server, n, references, replies, [](const Reply& r) {
      return r.body.starts_with("data: ") ? streamed_text(r) : completion_text(r);
    });
    const std::string session = server->session();
    EXPECT_EQ(server->terminate(30s), 0) << server->log();
    EXPECT_TRUE(shm_entries("omnistage_" + session).empty()) << "the session's shared memory is removed";
  }
}

TEST_F(ApiFrontendsTest, Qwen3TtsTwoAndFourFrontendsAnswerLikeOne) {
  auto speech = [](int i) {
    return Json({{"model", kModelName},
                 {"input", "Frontend test sentence number " + std::to_string(i % 4) + "."},
                 {"voice", "Vivian"},
                 {"response_format", "pcm"},
                 {"seed", 7},
                 {"max_new_tokens", 6}})
        .dump();
  };
  std::vector<std::string> references;
  {
    auto one = serve("qwen3_tts", "tts_n1.log", {});
    ASSERT_GT(one->port(), 0);
    for (int i = 0; i < 4; ++i) {
      Reply r = request(*one, "/v1/audio/speech", speech(i));
      ASSERT_EQ(r.status, 200) << r.body;
      ASSERT_FALSE(r.body.empty());
      references.push_back(r.body);
    }
  }
  for (int n : {2, 4}) {
    SCOPED_TRACE("--api-server-count " + std::to_string(n));
    auto server = serve("qwen3_tts", "tts_n" + std::to_string(n) + ".log", {"--api-server-count", std::to_string(n)});
    ASSERT_GT(server->port(), 0);
    EXPECT_EQ(children_running(server->pid(), "stage-worker").size(), 2u) << "talker and code2wav run once";
    auto replies = concurrently(kConcurrent, [&](int i) { return request(*server, "/v1/audio/speech", speech(i)); });
    expect_like_one_frontend(*server, n, references, replies, [](const Reply& r) { return r.body; });
    EXPECT_EQ(server->terminate(30s), 0) << server->log();
  }
}

TEST_F(ApiFrontendsTest, KilledFrontendFailsOnlyItsRequestsAndComesBack) {
  auto server = serve("qwen3", "kill.log", {"--api-server-count", "2"});
  ASSERT_GT(server->port(), 0);
  const std::vector<pid_t> workers = children_running(server->pid(), "stage-worker");
  const std::vector<pid_t> frontends = children_running(server->pid(), "serve");
  ASSERT_EQ(frontends.size(), 2u);

  // Process-local operations are refused; the routes of every frontend stay as they are otherwise.
  for (const auto& [method, path, operation] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"POST", "/v1/omni/sleep", "Sleep"},
           {"POST", "/v1/omni/wakeup", "Wakeup"},
           {"POST", "/v1/audio/voices", "Runtime voice upload"},
           {"DELETE", "/v1/audio/voices/aiden", "Runtime voice deletion"}}) {
    Reply r = request(*server, path, "{}", method);
    EXPECT_EQ(r.status, 409) << method << " " << path << ": " << r.body;
    EXPECT_EQ(Json::parse(r.body)["error"]["message"],
              operation +
                  " is not supported with --api-server-count > 1 because the operation uses process-local "
                  "frontend state");
  }

  const std::string reference = completion_text(request(*server, "/v1/completions", completion_body(1, 600)));
  ASSERT_FALSE(reference.empty());
  // Long streams, so that the kill finds some of them running.
  std::atomic<bool> killed = false;
  std::thread killer([&] {
    std::this_thread::sleep_for(700ms);
    // The frontend pid that took requests first is whichever; kill frontend 0 by its index.
    const std::string log = server->log();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(API frontend 0 started, pid (\d+))")));
    kill(std::stoi(m[1]), SIGKILL);
    killed = true;
  });
  auto replies =
      concurrently(16, [&](int) { return request(*server, "/v1/completions", completion_body(1, 600, true)); });
  killer.join();
  ASSERT_TRUE(killed);
  int survivors = 0;
  int failed = 0;
  for (const Reply& r : replies) {
    const bool complete = r.status == 200 && r.body.find("data: [DONE]") != std::string::npos;
    if (r.frontend == 1) {
      ++survivors;
      EXPECT_TRUE(complete) << "a request of the surviving frontend failed: " << r.body.substr(0, 300);
      EXPECT_EQ(streamed_text(r), reference) << "a surviving stream differs";
    }
    if (!complete) {
      ++failed;
      EXPECT_NE(r.frontend, 1) << "only the killed frontend's requests fail";
    }
  }
  EXPECT_GT(survivors, 0) << "no request reached frontend 1";
  EXPECT_GT(failed, 0) << "the kill found no request of frontend 0 running";

  // It comes back; the stages were never restarted.
  for (auto deadline = std::chrono::steady_clock::now() + 30s; std::chrono::steady_clock::now() < deadline;) {
    const std::string log = server->log();
    const size_t first = log.find("API frontend 0 of 2 serving");
    if (first != std::string::npos && log.find("API frontend 0 of 2 serving", first + 1) != std::string::npos) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(children_running(server->pid(), "serve").size(), 2u) << server->log();
  EXPECT_EQ(children_running(server->pid(), "stage-worker"), workers) << "the stage process is the same";
  auto after =
      concurrently(32, [&](int i) { return request(*server, "/v1/completions", completion_body(i % kPrompts, 4)); });
  std::set<int> answered_by;
  for (const Reply& r : after) {
    EXPECT_EQ(r.status, 200) << r.body;
    answered_by.insert(r.frontend);
  }
  EXPECT_EQ(answered_by, (std::set<int>{0, 1})) << "the restarted frontend serves again";
  EXPECT_EQ(server->terminate(30s), 0) << server->log();
}

TEST_F(ApiFrontendsTest, FlagsThatCannotCombineWithSeveralFrontendsAreNamed) {
  for (const auto& [flags, named] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--enable-sleep-mode"}, "--enable-sleep-mode"},
           {{"--omni-dp-size-local", "2", "--stage-id", "0", "-oma", "127.0.0.1", "-omp", "26000"}, "--stage-id"}}) {
    std::vector<std::string> argv = {OMNISTAGE_BINARY, "serve", (dir_->path() / "qwen3").string(), "--api-server-count",
                                     "2"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    ProcessResult r = run_process(argv);
    EXPECT_EQ(r.exit_code, 64) << r.err;
    EXPECT_NE(r.err.find("--api-server-count > 1"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(named), std::string::npos) << r.err;
  }
}

TEST_F(ApiFrontendsTest, SleepFreesTheStageMemoryAndWakeUpRestoresTheOutputs) {
  auto server = serve("qwen3", "sleep.log", {"--enable-sleep-mode"});
  ASSERT_GT(server->port(), 0);
  const std::vector<pid_t> workers = children_running(server->pid(), "stage-worker");
  ASSERT_EQ(workers.size(), 1u);
  auto outputs = [&] {
    std::vector<std::string> texts;
    for (int p = 0; p < kPrompts; ++p)
      texts.push_back(completion_text(request(*server, "/v1/completions", completion_body(p, 8))));
    return texts;
  };
  const std::vector<std::string> before = outputs();
  // Fill a good part of the KV cache, so that freeing it shows in the resident set.
  concurrently(kConcurrent, [&](int i) { return request(*server, "/v1/completions", completion_body(100 + i, 64)); });

  EXPECT_EQ(request(*server, "/v1/omni/wakeup", "{}").body, R"({"status":"SKIPPED"})") << "nothing sleeps yet";
  for (int level : {1, 2}) {
    SCOPED_TRACE("level " + std::to_string(level));
    const int64_t awake = resident_bytes(workers[0]);
    Reply slept = request(*server, "/v1/omni/sleep", Json({{"stage_ids", {0}}, {"level", level}}).dump());
    ASSERT_EQ(slept.status, 200) << slept.body;
    const Json ack = Json::parse(slept.body);
    EXPECT_EQ(ack["status"], "SUCCESS");
    ASSERT_EQ(ack["acks"].size(), 1u);
    EXPECT_EQ(ack["acks"][0]["stage_id"], 0);
    EXPECT_EQ(ack["acks"][0]["level"], level);
    const int64_t asleep = resident_bytes(workers[0]);
    // Level 1 returns the KV blocks written above; level 2 also the weights (the 78 MB embedding).
    EXPECT_LT(asleep, awake - (level == 1 ? 4 : 50) * (int64_t{1} << 20)) << awake << " -> " << asleep;
    EXPECT_LT(ack["acks"][0]["rss_after_bytes"].get<int64_t>(), ack["acks"][0]["rss_before_bytes"].get<int64_t>());

    Reply refused = request(*server, "/v1/completions", completion_body(0, 8));
    EXPECT_EQ(refused.status, 503) << refused.body;
    EXPECT_NE(refused.body.find("stage 0 is asleep"), std::string::npos) << refused.body;
    Reply health = request(*server, "/health", std::nullopt);
    EXPECT_EQ(health.status, 200);
    EXPECT_EQ(Json::parse(health.body)["sleeping_stages"], Json::array({0})) << health.body;

    Reply woke = request(*server, "/v1/omni/wakeup", Json({{"stage_ids", {0}}}).dump());
    ASSERT_EQ(woke.status, 200) << woke.body;
    EXPECT_EQ(Json::parse(woke.body)["status"], "SUCCESS");
    EXPECT_FALSE(Json::parse(request(*server, "/health", std::nullopt).body).contains("sleeping_stages"));
    EXPECT_EQ(outputs(), before) << "greedy outputs after waking up";
  }
  Reply bad = request(*server, "/v1/omni/sleep", Json({{"stage_ids", {5}}}).dump());
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_NE(bad.body.find("stage_ids"), std::string::npos) << bad.body;
  Reply bad_level = request(*server, "/v1/omni/sleep", Json({{"level", 3}}).dump());
  EXPECT_EQ(bad_level.status, 400) << bad_level.body;
  EXPECT_EQ(server->terminate(30s), 0) << server->log();
}

TEST_F(ApiFrontendsTest, SleepNeedsTheFlag) {
  auto server = serve("qwen3", "no_sleep_mode.log", {});
  ASSERT_GT(server->port(), 0);
  Reply r = request(*server, "/v1/omni/sleep", "{}");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("--enable-sleep-mode"), std::string::npos) << r.body;
}

}  // namespace
}  // namespace omni::testing
