// The distributed stage launch end to end (docs/distributed.md): a head (`serve --stage-id 0 -oma
// -omp`) and headless workers (`serve --stage-id N --headless`) as separate `omnistage serve`
// processes on the demo checkpoints — on loopback, and as two hosts in network namespaces joined
// by a veth pair where the sandbox lets the test create them. Checked: /health names the missing
// stage until its worker registers; requests through a remote stage; a pool of remote replicas
// under each --omni-lb-policy (the distribution of the requests); a replica killed with SIGKILL
// under load (every request completes or, streaming, ends with an error naming the replica; new
// requests go to the survivor); a restarted replica registering again and serving; a head
// restarted under its workers (they register again); a worker with another deploy YAML refused
// with the field named. Timers are short (--omni-heartbeat-*) so that each test takes seconds.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
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
using Clock = std::chrono::steady_clock;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t size = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
  close(fd);
  return ntohs(address.sin_port);
}

// One `omnistage serve` process (optionally inside a network namespace: `prefix` is `ip netns
// exec NAME`), its output in a log file.
class Serve {
 public:
  Serve(std::vector<std::string> args, fs::path log, std::vector<std::string> prefix = {}) : log_(std::move(log)) {
    std::vector<std::string> argv = std::move(prefix);
    argv.push_back(OMNISTAGE_BINARY);
    argv.push_back("serve");
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      FILE* out = freopen(log_.c_str(), "w", stdout);
      if (out == nullptr || dup2(fileno(stdout), STDERR_FILENO) < 0) _exit(127);
      std::vector<char*> raw;
      for (std::string& arg : argv) raw.push_back(arg.data());
      raw.push_back(nullptr);
      execv(raw[0], raw.data());
      _exit(127);
    }
  }
  ~Serve() {
    if (pid_ > 0) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // Waits until the log matches `pattern`; the match, or nullopt after `timeout` or an exit.
  std::optional<std::smatch> wait_for(const std::string& pattern, std::chrono::milliseconds timeout = 30s) {
    const std::regex re(pattern);
    for (auto deadline = Clock::now() + timeout; Clock::now() < deadline;) {
      text_ = read_text(log_);
      std::smatch m;
      if (std::regex_search(text_, m, re)) return m;
      if (exited()) break;
      std::this_thread::sleep_for(25ms);
    }
    text_ = read_text(log_);
    std::smatch m;
    if (std::regex_search(text_, m, re)) return m;
    return std::nullopt;
  }

  bool exited() {
    if (pid_ <= 0) return true;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      pid_ = -1;
      return true;
    }
    return false;
  }
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    for (auto deadline = Clock::now() + timeout; Clock::now() < deadline; std::this_thread::sleep_for(20ms)) {
      if (exited()) return status_;
    }
    return std::nullopt;
  }
  void signal(int sig) { kill(pid_, sig); }
  // `sig` to the replica processes it started (each leads its own process group).
  void signal_replicas(int sig) {
    for (pid_t child : children_of(pid_)) kill(child, sig);
  }
  // SIGKILL of the whole process group: the serve process and the replica processes it started.
  void kill_group() {
    kill(-pid_, SIGKILL);
    wait_exit(5s);
  }
  std::string log() const { return read_text(log_); }

 private:
  fs::path log_;
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::string text_;
};

struct Reply {
  int status = 0;
  std::string body;
};

Reply http(const std::string& url, const std::optional<Json>& body, const std::vector<std::string>& prefix = {},
           int max_time = 30) {
  std::vector<std::string> argv = prefix;
  argv.insert(argv.end(),
              {"/usr/bin/curl", "-sS", "-N", "--max-time", std::to_string(max_time), "-w", "\n%{http_code}"});
  if (body) argv.insert(argv.end(), {"-H", "Content-Type: application/json", "--data-binary", body->dump()});
  argv.push_back(url);
  ProcessResult result = run_process(argv);
  Reply reply;
  const size_t split = result.out.rfind('\n');
  if (split != std::string::npos) {
    reply.body = result.out.substr(0, split);
    reply.status = std::atoi(result.out.c_str() + split + 1);
  }
  return reply;
}

Json speech(int frames, bool stream = false) {
  Json body = {{"input", "Hello from a distributed pipeline."},
               {"voice", "Vivian"},
               {"response_format", stream ? "pcm" : "wav"},
               {"max_new_tokens", frames},
               {"seed", 7}};
  if (stream) body.update({{"stream", true}, {"stream_format", "sse"}});
  return body;
}

class DistributedServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    for (const char* arch : {"qwen3_tts", "qwen3"}) {
      ProcessResult made =
          run_process({OMNISTAGE_BINARY, "demo-model", "--arch", arch, "--out", (dir_->path() / arch).string()});
      ASSERT_EQ(made.exit_code, 0) << made.err;
    }
  }
  static void TearDownTestSuite() { dir_.reset(); }

  void SetUp() override { master_port_ = free_port(); }

  fs::path model(const std::string& arch) const { return dir_->path() / arch; }
  fs::path log(const std::string& name) const {
    return dir_->path() / (::testing::UnitTest::GetInstance()->current_test_info()->name() + ("." + name + ".log"));
  }

  // A head serving stage 0 with the master on 127.0.0.1 (or `address`), short timers.
  std::unique_ptr<Serve> head(const std::string& arch, std::vector<std::string> extra = {},
                              const std::string& address = "127.0.0.1", std::vector<std::string> prefix = {}) {
    std::vector<std::string> args = {model(arch).string(),
                                     "--host",
                                     address,
                                     "--port",
                                     "0",
                                     "--stage-id",
                                     "0",
                                     "-oma",
                                     address,
                                     "-omp",
                                     std::to_string(master_port_),
                                     "--omni-heartbeat-interval",
                                     "0.2",
                                     "--omni-heartbeat-timeout",
                                     "4",  // a loaded CI machine can starve a replica for 1-2 s
                                     "--omni-replica-grace",
                                     "3"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto process = std::make_unique<Serve>(args, log("head" + std::to_string(heads_++)), prefix);
    auto ready = process->wait_for(R"(ready on http://[0-9.]+:(\d+))");
    EXPECT_TRUE(ready) << process->log();
    if (ready) port_ = std::stoi((*ready)[1]);
    host_ = address;
    return process;
  }

  // A headless worker of `stage`; waits for its registration unless `wait` is false.
  std::unique_ptr<Serve> worker(const std::string& arch, int stage, std::vector<std::string> extra = {},
                                bool wait = true, const std::string& master = "127.0.0.1",
                                std::vector<std::string> prefix = {}) {
    std::vector<std::string> args = {model(arch).string(),
                                     "--stage-id",
                                     std::to_string(stage),
                                     "--headless",
                                     "-oma",
                                     master,
                                     "-omp",
                                     std::to_string(master_port_),
                                     "--omni-heartbeat-interval",
                                     "0.2"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto process = std::make_unique<Serve>(args, log("worker" + std::to_string(workers_++)), prefix);
    if (wait) EXPECT_TRUE(process->wait_for(R"(replica \d+ ready)")) << process->log();
    return process;
  }

  std::string url(const std::string& path) const { return "http://" + host_ + ":" + std::to_string(port_) + path; }
  std::string metrics(const std::vector<std::string>& prefix = {}) { return http(url("/metrics"), {}, prefix).body; }

  // Waits until the head's /metrics shows `count` replicas of `stage` in `state`.
  bool wait_replicas(int stage, const std::string& state, int count, std::chrono::milliseconds timeout = 15s) {
    const std::string series = fmt::format("omnistage:stage_replicas{{stage=\"{}\",state=\"{}\"}}", stage, state);
    for (auto deadline = Clock::now() + timeout; Clock::now() < deadline; std::this_thread::sleep_for(50ms)) {
      if (metric_series(metrics(), series) == count) return true;
    }
    return false;
  }

  double taken(int stage, int replica) {
    return metric_series(
        metrics(), fmt::format("omnistage:replica_requests_taken{{stage=\"{}\",replica=\"{}\"}}", stage, replica));
  }

  static inline std::unique_ptr<TempDir> dir_;
  int master_port_ = 0;
  int port_ = 0;
  std::string host_ = "127.0.0.1";
  int heads_ = 0;
  int workers_ = 0;
};

TEST_F(DistributedServeTest, HeadWaitsForItsRemoteStageThenServesThroughIt) {
  auto h = head("qwen3_tts", {"--stage-init-timeout", "8"});  // its own stage starts in 1-3 s
  Reply health = http(url("/health"), {});
  EXPECT_EQ(health.status, 503);
  EXPECT_NE(health.body.find("no healthy replica of stage(s) 1"), std::string::npos) << health.body;
  Reply refused = http(url("/v1/audio/speech"), speech(4));
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.body.find("stage 1 has no healthy replica"), std::string::npos) << refused.body;

  // Past --stage-init-timeout the head says so and goes on; the worker that joins late is welcome.
  EXPECT_TRUE(h->wait_for(R"(stage 1: no replica ready within --stage-init-timeout=8s)", 15s)) << h->log();
  auto w = worker("qwen3_tts", 1);
  ASSERT_TRUE(wait_replicas(1, "ready", 1)) << metrics();
  EXPECT_EQ(http(url("/health"), {}).status, 200);
  Reply audio = http(url("/v1/audio/speech"), speech(8));
  ASSERT_EQ(audio.status, 200) << audio.body;
  EXPECT_EQ(audio.body.substr(0, 4), "RIFF");
  EXPECT_GT(audio.body.size(), 1000u);
  EXPECT_EQ(taken(1, 0), 1) << metrics();
  // Same host: the payloads of the edge 0 -> 1 stay in shared memory.
  EXPECT_EQ(w->log().find("carries its payloads inline"), std::string::npos) << w->log();
}

// The head's replica of stage 0 and a worker's two (--omni-dp-size-local 2) serve in turn.
TEST_F(DistributedServeTest, Qwen3HeadAndHeadlessReplicasFormOnePool) {
  auto h = head("qwen3", {"--omni-lb-policy", "round-robin"});
  auto w = worker("qwen3", 0, {"--omni-dp-size-local", "2"});
  ASSERT_TRUE(wait_replicas(0, "ready", 3)) << metrics();
  Json body = {{"model", model("qwen3").string()}, {"prompt", "Hello"}, {"max_tokens", 4}, {"temperature", 0}};
  for (int i = 0; i < 6; ++i) {
    Reply reply = http(url("/v1/completions"), body);
    ASSERT_EQ(reply.status, 200) << reply.body;
    EXPECT_EQ(Json::parse(reply.body)["usage"]["completion_tokens"], 4) << reply.body;
  }
  for (int replica = 0; replica < 3; ++replica) EXPECT_EQ(taken(0, replica), 2) << metrics();
  EXPECT_NE(w->log().find("local replica 1 started"), std::string::npos) << w->log();
}

// SIGSTOP: the replica goes silent (its process lives) and is ERROR after the heartbeat timeout;
// the requests go to the other one; SIGCONT: its heartbeats bring it back.
TEST_F(DistributedServeTest, ASilentReplicaIsErrorUntilItIsHeardAgain) {
  auto h = head("qwen3_tts", {"--omni-lb-policy", "round-robin"});
  auto a = worker("qwen3_tts", 1);
  auto b = worker("qwen3_tts", 1);
  ASSERT_TRUE(wait_replicas(1, "ready", 2)) << metrics();
  a->signal_replicas(SIGSTOP);
  ASSERT_TRUE(wait_replicas(1, "error", 1, 8s)) << metrics();
  const double before = taken(1, 1);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(http(url("/v1/audio/speech"), speech(4)).status, 200);
  EXPECT_EQ(taken(1, 1), before + 3) << metrics();
  a->signal_replicas(SIGCONT);
  EXPECT_TRUE(wait_replicas(1, "ready", 2, 8s)) << metrics();
  EXPECT_NE(h->log().find("heard again, back in the pool"), std::string::npos) << h->log();
}

TEST_F(DistributedServeTest, AWorkerWithoutAHeadGivesUpAfterTheStageInitTimeout) {
  auto w = worker("qwen3_tts", 1, {"--stage-init-timeout", "1"}, false);
  EXPECT_EQ(w->wait_exit(10s), 75) << w->log();
  EXPECT_NE(w->log().find("did not answer the registration within --stage-init-timeout=1s"), std::string::npos)
      << w->log();
}

TEST_F(DistributedServeTest, EachLbPolicyDistributesOverTwoRemoteReplicas) {
  for (const std::string policy : {"round-robin", "random", "least-queue-length"}) {
    SCOPED_TRACE(policy);
    master_port_ = free_port();
    auto h = head("qwen3_tts", {"--omni-lb-policy", policy});
    auto a = worker("qwen3_tts", 1);
    auto b = worker("qwen3_tts", 1);
    ASSERT_TRUE(wait_replicas(1, "ready", 2)) << metrics();
    if (policy == "least-queue-length") {
      // A long request occupies one replica; the short ones behind it go to the other.
      std::thread long_request([&] { EXPECT_EQ(http(url("/v1/audio/speech"), speech(800)).status, 200); });
      for (auto deadline = Clock::now() + 5s; taken(1, 0) + taken(1, 1) < 1 && Clock::now() < deadline;) {
        std::this_thread::sleep_for(20ms);
      }
      const int busy = taken(1, 0) == 1 ? 0 : 1;
      for (int i = 0; i < 4; ++i) ASSERT_EQ(http(url("/v1/audio/speech"), speech(4)).status, 200);
      long_request.join();
      EXPECT_EQ(taken(1, busy), 1) << metrics();
      EXPECT_EQ(taken(1, 1 - busy), 4) << metrics();
      continue;
    }
    const int requests = policy == "random" ? 24 : 6;
    std::vector<std::thread> clients;
    std::atomic<int> ok{0};
    for (int c = 0; c < 3; ++c) {
      clients.emplace_back([&] {
        for (int i = 0; i < requests / 3; ++i) ok += http(url("/v1/audio/speech"), speech(4)).status == 200;
      });
    }
    for (std::thread& client : clients) client.join();
    ASSERT_EQ(ok, requests);
    if (policy == "round-robin") {
      EXPECT_EQ(taken(1, 0), 3) << metrics();
      EXPECT_EQ(taken(1, 1), 3) << metrics();
    } else {  // both take some: all 24 on one replica has probability 2^-23
      EXPECT_GT(taken(1, 0), 0) << metrics();
      EXPECT_GT(taken(1, 1), 0) << metrics();
      EXPECT_EQ(taken(1, 0) + taken(1, 1), requests) << metrics();
    }
  }
}

TEST_F(DistributedServeTest, ReplicaKilledUnderLoadLosesNoRequestAndARestartedOneServes) {
  auto h = head("qwen3_tts", {"--omni-lb-policy", "round-robin"});
  auto a = worker("qwen3_tts", 1);
  auto b = worker("qwen3_tts", 1);
  ASSERT_TRUE(wait_replicas(1, "ready", 2)) << metrics();

  constexpr int kRequests = 8;  // every fourth one streams
  std::vector<Reply> replies(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&, i] { replies[i] = http(url("/v1/audio/speech"), speech(100, i % 4 == 3)); });
  }
  // Round-robin gives replica 0 four of them, at most two streaming: once it has three, one it holds
  // has to be replayed.
  for (auto deadline = Clock::now() + 10s; taken(1, 0) < 3 && Clock::now() < deadline;) {
    std::this_thread::sleep_for(10ms);
  }
  a->kill_group();
  // Same host: the head watches the replica's pid, so it is DOWN at once (not ERROR after the timeout).
  EXPECT_TRUE(wait_replicas(1, "down", 1, 5s)) << metrics() << h->log();
  for (std::thread& client : clients) client.join();  // curl's --max-time: none may hang
  int replayed_or_done = 0;
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(replies[i].status, 200) << replies[i].body;
    if (i % 4 == 3 && replies[i].body.find("\"error\"") != std::string::npos) {
      EXPECT_NE(replies[i].body.find("stage 1 (replica"), std::string::npos) << replies[i].body;
    } else if (i % 4 != 3) {
      EXPECT_EQ(replies[i].body.substr(0, 4), "RIFF");
      ++replayed_or_done;
    }
  }
  EXPECT_EQ(replayed_or_done, 6);
  EXPECT_NE(h->log().find("; replayed on stage 1 replica 1"), std::string::npos) << h->log();
  ASSERT_TRUE(wait_replicas(1, "ready", 1)) << metrics();
  const double survivor_before = taken(1, 1);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(http(url("/v1/audio/speech"), speech(4)).status, 200);
  EXPECT_EQ(taken(1, 1), survivor_before + 3) << metrics();

  // Restarted, the replica registers again and takes its share.
  auto restarted = worker("qwen3_tts", 1);
  ASSERT_TRUE(wait_replicas(1, "ready", 2)) << metrics();
  for (int i = 0; i < 4; ++i) ASSERT_EQ(http(url("/v1/audio/speech"), speech(4)).status, 200);
  EXPECT_EQ(taken(1, 1), survivor_before + 3 + 2) << metrics();
  // After the grace period the dead replica leaves the listing.
  EXPECT_TRUE(wait_replicas(1, "down", 0, 10s) && wait_replicas(1, "error", 0, 1s)) << metrics();
}

TEST_F(DistributedServeTest, WorkersRegisterAgainWithARestartedHead) {
  auto h = head("qwen3_tts");
  auto w = worker("qwen3_tts", 1);
  ASSERT_TRUE(wait_replicas(1, "ready", 1)) << metrics();
  h->signal(SIGTERM);
  ASSERT_EQ(h->wait_exit(10s), 0) << h->log();
  std::this_thread::sleep_for(500ms);
  EXPECT_FALSE(w->exited()) << w->log();  // it waits for the next head
  h = head("qwen3_tts");
  ASSERT_TRUE(wait_replicas(1, "ready", 1)) << metrics() << w->log();
  EXPECT_NE(w->log().find("registering again"), std::string::npos) << w->log();
  Reply audio = http(url("/v1/audio/speech"), speech(8));
  EXPECT_EQ(audio.status, 200) << audio.body;
  w->signal(SIGTERM);
  EXPECT_EQ(w->wait_exit(10s), 0) << w->log();
  ASSERT_TRUE(wait_replicas(1, "down", 1, 5s)) << metrics();
}

TEST_F(DistributedServeTest, WorkerWithAnotherDeployConfigIsRefusedNamingTheField) {
  const fs::path deploy = dir_->path() / "changed_deploy.yaml";
  {
    std::string yaml = read_text(fs::path(OMNISTAGE_SOURCE_DIR) / "deploy" / "qwen3_tts.yaml");
    const std::string from = "max_model_len: 65536\n";  // stage 1's
    yaml.replace(yaml.find(from), from.size(), "max_model_len: 32768\n");
    std::ofstream(deploy) << yaml;
  }
  auto h = head("qwen3_tts");
  auto w = worker("qwen3_tts", 1, {"--deploy-config", deploy.string()}, false);
  ASSERT_EQ(w->wait_exit(20s), 78) << w->log();
  EXPECT_NE(w->log().find("differs from the head's at stages[1].engine_args.max_model_len: the head has 65536, "
                          "the worker 32768"),
            std::string::npos)
      << w->log();
  EXPECT_NE(h->log().find("refused the headless worker"), std::string::npos) << h->log();
  // A stage-local CLI flag is the worker's own business.
  auto tuned = worker("qwen3_tts", 1, {"--max-num-seqs", "16"});
  EXPECT_TRUE(wait_replicas(1, "ready", 1)) << metrics();
}

// Two hosts: the head in one network namespace, the worker in another, joined by a veth pair.
class NetworkNamespaces {
 public:
  NetworkNamespaces() {
    const std::string tag = std::to_string(getpid() % 100000);
    a_ = "omni-a" + tag;
    b_ = "omni-b" + tag;
    const std::string va = "ova" + tag, vb = "ovb" + tag;
    for (const std::vector<std::string>& command :
         std::vector<std::vector<std::string>>{{"netns", "add", a_},
                                               {"netns", "add", b_},
                                               {"link", "add", va, "type", "veth", "peer", "name", vb},
                                               {"link", "set", va, "netns", a_},
                                               {"link", "set", vb, "netns", b_},
                                               {"-n", a_, "addr", "add", "10.231.0.1/24", "dev", va},
                                               {"-n", b_, "addr", "add", "10.231.0.2/24", "dev", vb},
                                               {"-n", a_, "link", "set", va, "up"},
                                               {"-n", b_, "link", "set", vb, "up"},
                                               {"-n", a_, "link", "set", "lo", "up"},
                                               {"-n", b_, "link", "set", "lo", "up"}}) {
      std::vector<std::string> argv = {"/usr/sbin/ip"};
      argv.insert(argv.end(), command.begin(), command.end());
      ProcessResult result = run_process(argv);
      if (result.exit_code != 0) {
        refusal_ = "ip " + command[0] + " " + command[1] + ": " + result.err;
        return;
      }
    }
    std::vector<std::string> probe = in_b();
    probe.push_back("/usr/bin/true");
    if (ProcessResult result = run_process(probe); result.exit_code != 0) {
      refusal_ = "a private /dev/shm in the namespace (unshare -m, mount): " + result.err;
    }
  }
  ~NetworkNamespaces() {
    run_process({"/usr/sbin/ip", "netns", "del", a_});
    run_process({"/usr/sbin/ip", "netns", "del", b_});
  }
  const std::string& refusal() const { return refusal_; }
  std::vector<std::string> in_a() const { return {"/usr/sbin/ip", "netns", "exec", a_}; }
  // Host B also gets its own /dev/shm: a payload that tried shared memory across would be lost.
  std::vector<std::string> in_b() const {
    return {"/usr/sbin/ip",
            "netns",
            "exec",
            b_,
            "/usr/bin/unshare",
            "-m",
            "--propagation",
            "private",
            "/usr/bin/sh",
            "-c",
            "mount -t tmpfs none /dev/shm && exec \"$0\" \"$@\""};
  }

 private:
  std::string a_, b_, refusal_;
};

// Both directions of the edge 0 -> 1 across hosts: the head's stage produces (the head sends the
// payloads inline to the remote consumer), then the remote stage produces (it sends them inline).
TEST_F(DistributedServeTest, EdgesBetweenHostsCarryTheirPayloadsOverTcp) {
  if (!fs::exists("/usr/sbin/ip") || !fs::exists("/usr/bin/unshare") || geteuid() != 0) {
    GTEST_SKIP() << "needs root, /usr/sbin/ip and /usr/bin/unshare for network namespaces";
  }
  NetworkNamespaces hosts;
  if (!hosts.refusal().empty()) GTEST_SKIP() << "the sandbox refuses network namespaces: " << hosts.refusal();
  for (int head_stage : {0, 1}) {
    SCOPED_TRACE(head_stage);
    master_port_ = free_port();
    std::vector<std::string> args = {model("qwen3_tts").string(),
                                     "--host",
                                     "10.231.0.1",
                                     "--port",
                                     "0",
                                     "--stage-id",
                                     std::to_string(head_stage),
                                     "-oma",
                                     "10.231.0.1",
                                     "-omp",
                                     std::to_string(master_port_)};
    Serve h(args, log("head_stage" + std::to_string(head_stage)), hosts.in_a());
    auto ready = h.wait_for(R"(ready on http://[0-9.]+:(\d+))");
    ASSERT_TRUE(ready) << h.log();
    port_ = std::stoi((*ready)[1]);
    host_ = "10.231.0.1";
    auto w = worker("qwen3_tts", 1 - head_stage, {}, true, "10.231.0.1", hosts.in_b());
    EXPECT_NE(w->log().find("as 10.231.0.2"), std::string::npos) << w->log();  // the routing probe's address
    EXPECT_NE(h.log().find("another host: payloads travel inline"), std::string::npos) << h.log();
    if (head_stage == 1) EXPECT_NE(w->log().find("carries its payloads inline"), std::string::npos) << w->log();
    Reply audio = http(url("/v1/audio/speech"), speech(30), hosts.in_a());
    ASSERT_EQ(audio.status, 200) << audio.body << h.log() << w->log();
    EXPECT_EQ(audio.body.substr(0, 4), "RIFF");
    EXPECT_GT(audio.body.size(), 10000u);
  }
}

}  // namespace
}  // namespace omni::testing
