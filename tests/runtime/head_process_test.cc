// The head as a process: exit code and message on a stage init failure, clean shutdown on
// SIGTERM/SIGINT, and stage processes that die with a head killed outright.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "runtime/runtime_test_support.h"
#include "runtime/shm_connector.h"
#include "support/subprocess.h"

namespace omni::runtime {
namespace {

using namespace std::chrono_literals;
using testing::echo_stage;
using testing::eventually;
using testing::session_segments;

std::string pipeline_json(const std::vector<StageSpec>& stages, const std::string& endpoint = "") {
  Json json = {{"stages", Json::array()}, {"control_endpoint", endpoint}};
  for (const StageSpec& stage : stages) json["stages"].push_back(to_json(stage));
  return json.dump();
}

// True once `pid` no longer exists or is a zombie waiting for a reaper.
bool process_gone(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  return line.substr(line.rfind(')') + 2, 1) == "Z";
}

// A running head with its stdout as a pipe.
struct Head {
  Head() = default;
  Head(Head&& other) noexcept
      : pid(std::exchange(other.pid, -1)),
        out(std::exchange(other.out, -1)),
        session(std::move(other.session)),
        stage_pids(std::move(other.stage_pids)) {}
  pid_t pid = -1;
  int out = -1;
  std::string session;
  std::vector<pid_t> stage_pids;

  static Head start(const std::string& pipeline) {
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0);
    Head head;
    head.pid = fork();
    if (head.pid == 0) {
      dup2(fds[1], 1);
      execl(RUNTIME_TEST_HEAD, RUNTIME_TEST_HEAD, pipeline.c_str(), nullptr);
      _exit(127);
    }
    close(fds[1]);
    head.out = fds[0];
    std::istringstream ready(head.read_line(20s));
    std::string word;
    ready >> word >> head.session;
    EXPECT_EQ(word, "ready");
    for (pid_t p; ready >> p;) head.stage_pids.push_back(p);
    return head;
  }

  std::string read_line(std::chrono::milliseconds timeout) {
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    char c;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd item{out, POLLIN, 0};
      if (poll(&item, 1, 50) <= 0) continue;
      if (read(out, &c, 1) != 1) break;
      if (c == '\n') return line;
      line += c;
    }
    return line;
  }

  // The exit status (128 + signal when killed), or -1 if it did not end within `timeout`.
  int wait(std::chrono::milliseconds timeout) {
    int status = 0;
    bool ended = eventually([&] { return waitpid(pid, &status, WNOHANG) == pid; }, timeout);
    if (!ended) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
    pid = -1;
    return ended ? (WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) : -1;
  }

  // A failed test must not leave a head (and through it, stages) running.
  ~Head() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (out >= 0) close(out);
    if (!session.empty()) unlink_session_segments(session);
  }
};

std::vector<StageSpec> busy_pipeline() {
  return {echo_stage(0, {}, false, "latents",
                     {{"max_tokens", 100000}, {"step_delay_ms", 10}, {"payload_bytes", 200000}, {"payload_chunks", 2}}),
          echo_stage(1, {0}, true, "audio")};
}

class HeadSignalTest : public ::testing::TestWithParam<int> {};

TEST_P(HeadSignalTest, ShutsDownWithinSecondsLeavingNoProcessAndNoSegment) {
  Head head = Head::start(pipeline_json(busy_pipeline()));
  ASSERT_EQ(head.stage_pids.size(), 2u);
  for (pid_t p : head.stage_pids) EXPECT_FALSE(process_gone(p));
  ASSERT_TRUE(eventually([&] { return session_segments(head.session).size() == 2; }));
  ASSERT_EQ(kill(head.pid, GetParam()), 0);
  EXPECT_EQ(head.read_line(5s), "stopped");
  EXPECT_EQ(head.wait(5s), 0);
  for (pid_t p : head.stage_pids) EXPECT_TRUE(process_gone(p)) << "stage pid " << p << " survived the head";
  EXPECT_TRUE(session_segments(head.session).empty());
}

INSTANTIATE_TEST_SUITE_P(Signals, HeadSignalTest, ::testing::Values(SIGTERM, SIGINT),
                         [](const auto& info) { return info.param == SIGTERM ? "SIGTERM" : "SIGINT"; });

TEST(HeadProcessTest, StagesDieWithAHeadKilledOutright) {
  Head head = Head::start(pipeline_json(busy_pipeline(), "tcp://127.0.0.1:*"));
  ASSERT_EQ(head.stage_pids.size(), 2u);
  ASSERT_EQ(kill(head.pid, SIGKILL), 0);
  EXPECT_EQ(head.wait(5s), 128 + SIGKILL);
  for (pid_t p : head.stage_pids) {
    EXPECT_TRUE(eventually([&] { return process_gone(p); })) << "stage pid " << p << " outlived its head";
  }
  // Nobody is left to remove the dead head's segments; ~Head does it for this test.
}

TEST(HeadProcessTest, StageInitFailureBecomesTheHeadsExitCodeAndMessage) {
  auto result = omni::testing::run_process(
      {RUNTIME_TEST_HEAD,
       pipeline_json({echo_stage(0, {}, true, "text", {{"fail_init", "tokenizer.json: unexpected end of file"}})})});
  EXPECT_EQ(result.exit_code, 65) << result.err;  // load_failed
  EXPECT_NE(result.err.find("runtime_test_head: error: stage 0 (replica 0) failed to start: tokenizer.json: unexpected "
                            "end of file (the stage process exited with code 65)"),
            std::string::npos)
      << result.err;
}

}  // namespace
}  // namespace omni::runtime
