// Faults of stage processes under load, end to end: `omnistage serve` on the demo checkpoints,
// 64 streamed requests in flight, then one stage process is killed with SIGKILL, stopped with
// SIGSTOP, or put in a memory cgroup too small for it so that the kernel's OOM killer ends it.
// What the server promises (docs/reliability.md, "Faults"):
//   - every request ends within the heartbeat timeout of the fault (plus the time to tell its
//     client): it completes, or it fails with an error naming the stage;
//   - /health then answers 503, and SIGTERM still shuts the server down;
//   - no child process and no /dev/shm segment of the session is left behind.
// And for the head itself: after a SIGKILL of the head its stage processes exit, and the next
// start removes the segments the dead head left (and only those of dead processes).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "integration/serve_process.h"

namespace omni::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kStreams = 64;
constexpr auto kHeartbeatTimeout = 3s;
// The time a client may need, past the heartbeat timeout, to see its request end: the head's
// check interval, the error event, curl's exit.
constexpr auto kSlack = 4s;

inline constexpr char kQwen3[] = "qwen3";
inline constexpr char kQwen3Tts[] = "qwen3_tts";

enum class Fault { kKill, kStop, kOom };

const char* fault_name(Fault fault) {
  switch (fault) {
    case Fault::kKill:
      return "SIGKILL";
    case Fault::kStop:
      return "SIGSTOP";
    case Fault::kOom:
      return "OOM kill";
  }
  return "?";
}

// A memory cgroup of its own for one process, limited so that its next allocations bring the
// kernel's OOM killer (cgroup v2, or v1's memory controller). Absent where no cgroup is writable.
// Neither version moves the memory a process already has into the group it joins: only pages it
// faults in afterwards count. A stage holds its memory from the start (weights, the KV cache
// written at init), but under load it still faults in and gives back a few hundred KiB a second
// (the heap trimmed and grown again, stacks, socket buffers), so a 64 KiB limit is crossed within
// a second, where 1 MiB was not always crossed in a whole test.
class MemoryCgroup {
 public:
  static std::unique_ptr<MemoryCgroup> create(const std::string& name) {
    std::ifstream cgroups("/proc/self/cgroup");
    std::optional<fs::path> parent;
    bool v1 = false;
    for (std::string line; std::getline(cgroups, line);) {
      const size_t first = line.find(':'), second = line.find(':', first + 1);
      const std::string controllers = line.substr(first + 1, second - first - 1);
      const std::string path = line.substr(second + 1);
      if (controllers == "memory") {
        parent = fs::path("/sys/fs/cgroup/memory") / path.substr(1);
        v1 = true;
      } else if (controllers.empty() && !parent && fs::exists("/sys/fs/cgroup/cgroup.controllers")) {
        parent = fs::path("/sys/fs/cgroup") / path.substr(1);
      }
    }
    if (!parent) return nullptr;
    std::error_code ec;
    fs::path dir = *parent / name;
    if (!fs::create_directory(dir, ec) || ec) return nullptr;
    auto group = std::unique_ptr<MemoryCgroup>(new MemoryCgroup(dir, v1));
    if (!group->write(v1 ? "memory.limit_in_bytes" : "memory.max", "65536")) return nullptr;
    group->write(v1 ? "memory.memsw.limit_in_bytes" : "memory.swap.max", v1 ? "65536" : "0");
    return group;
  }
  MemoryCgroup(const MemoryCgroup&) = delete;
  MemoryCgroup& operator=(const MemoryCgroup&) = delete;
  ~MemoryCgroup() {
    if (dir_.empty()) return;
    for (int i = 0; i < 100 && rmdir(dir_.c_str()) != 0; ++i) std::this_thread::sleep_for(50ms);
  }

  bool add(pid_t pid) { return write("cgroup.procs", std::to_string(pid)); }
  // How many processes of the group the OOM killer has ended.
  int oom_kills() const {
    std::ifstream in(dir_ / (v1_ ? "memory.oom_control" : "memory.events"));
    for (std::string key; in >> key;) {
      long long value = 0;
      in >> value;
      if (key == "oom_kill") return static_cast<int>(value);
    }
    return 0;
  }

 private:
  MemoryCgroup(fs::path dir, bool v1) : dir_(std::move(dir)), v1_(v1) {}
  bool write(const std::string& file, const std::string& value) {
    std::ofstream out(dir_ / file);
    out << value;
    out.flush();
    return static_cast<bool>(out);
  }
  fs::path dir_;
  bool v1_ = false;
};

// One streamed request and how it ended.
struct Stream {
  HttpResult result;
  Clock::time_point ended;
};

Json stream_body(const std::string& arch, int i) {
  if (arch == kQwen3Tts) {
    return {{"model", kModelName},    {"input", "Stream number " + std::to_string(i) + " keeps talking."},
            {"voice", "Vivian"},      {"stream", true},
            {"stream_format", "sse"}, {"response_format", "pcm"},
            {"max_new_tokens", 4000}, {"seed", i}};
  }
  return {{"model", kModelName},
          {"messages", Json::array({{{"role", "user"}, {"content", "Count to a million: " + std::to_string(i)}}})},
          {"max_tokens", 4000},
          {"ignore_eos", true},
          {"stream", true}};
}

// Completed: the stream's last event finished it. Failed naming a stage: an error event that says
// which stage. Anything else (a stream cut without a word) is what must not happen.
bool completed(const std::string& body) {
  return body.find("[DONE]") != std::string::npos || body.find("speech.audio.done") != std::string::npos;
}

std::optional<int> failed_stage(const std::string& body) {
  const size_t error = body.find("\"error\"");
  if (error == std::string::npos) return std::nullopt;
  const size_t stage = body.find("stage ", error);
  if (stage == std::string::npos) return std::nullopt;
  return std::atoi(body.c_str() + stage + 6);
}

// The demo checkpoint of `arch`, written once per test binary.
fs::path demo_model(const std::string& arch) {
  static TempDir dir;
  const fs::path path = dir.path() / arch;
  if (!fs::exists(path / "config.json")) {
    ProcessResult made = run_process({OMNISTAGE_BINARY, "demo-model", "--arch", arch, "--out", path.string()});
    EXPECT_EQ(made.exit_code, 0) << made.err;
  }
  return path;
}

struct FaultCase {
  std::string arch;
  int stage = 0;
  Fault fault = Fault::kKill;
};

class StageFaultTest : public ::testing::TestWithParam<FaultCase> {};

TEST_P(StageFaultTest, EveryStreamEndsWithinTheHeartbeatTimeoutAndNothingIsLeftBehind) {
  const FaultCase& c = GetParam();
  TempDir dir;
  std::unique_ptr<MemoryCgroup> cgroup;
  if (c.fault == Fault::kOom) {
    cgroup = MemoryCgroup::create("omnistage-oom-" + std::to_string(getpid()));
    if (!cgroup) GTEST_SKIP() << "no memory cgroup is writable here, so the OOM killer cannot be brought on";
  }
  ServeProcess server(demo_model(c.arch), dir.path() / "serve.log",
                      {"--omni-heartbeat-timeout", std::to_string(std::chrono::seconds(kHeartbeatTimeout).count())});
  ASSERT_GT(server.port(), 0);
  const std::vector<pid_t> children = children_of(server.pid());
  ASSERT_GT(children.size(), static_cast<size_t>(c.stage)) << "one process per stage";
  // Stage processes are started in stage order; their pids grow with it.
  std::vector<pid_t> stages = children;
  std::sort(stages.begin(), stages.end());
  const pid_t victim = stages[c.stage];

  const std::string path = c.arch == kQwen3Tts ? "/v1/audio/speech" : "/v1/chat/completions";
  std::vector<Stream> streams(kStreams);
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      streams[i].result = curl(server, path, stream_body(c.arch, i).dump(), {"--max-time", "90"});
      streams[i].ended = Clock::now();
    });
  }
  // The fault comes while the streams are running.
  std::this_thread::sleep_for(2s);
  Clock::time_point fault_at = Clock::now();
  switch (c.fault) {
    case Fault::kKill:
      ASSERT_EQ(kill(victim, SIGKILL), 0);
      break;
    case Fault::kStop:
      ASSERT_EQ(kill(victim, SIGSTOP), 0);
      break;
    case Fault::kOom:
      ASSERT_TRUE(cgroup->add(victim)) << "cannot move stage " << c.stage << " into the memory cgroup";
      // The fault is the kill, which comes when the stage next faults in 64 KiB, not the move.
      for (auto until = Clock::now() + 30s; cgroup->oom_kills() < 1 && Clock::now() < until;) {
        std::this_thread::sleep_for(10ms);
      }
      fault_at = Clock::now();
      break;
  }
  for (std::thread& client : clients) client.join();

  int done = 0, failed = 0;
  for (int i = 0; i < kStreams; ++i) {
    const Stream& s = streams[i];
    const std::string tail = s.result.body.substr(s.result.body.size() > 400 ? s.result.body.size() - 400 : 0);
    EXPECT_LE(s.ended - fault_at, kHeartbeatTimeout + kSlack) << "stream " << i << " ended late; its end:\n" << tail;
    if (std::optional<int> stage = failed_stage(s.result.body)) {
      ++failed;
      EXPECT_EQ(*stage, c.stage) << "stream " << i << " names the wrong stage:\n" << tail;
    } else if (completed(s.result.body)) {
      ++done;
    } else {
      ADD_FAILURE() << "stream " << i << " (status " << s.result.status
                    << ") neither completed nor named the failed stage; its end:\n"
                    << tail;
    }
  }
  EXPECT_GT(failed, 0) << "the fault (" << fault_name(c.fault) << ") failed no request: it came too late";
  if (c.fault == Fault::kOom) EXPECT_GE(cgroup->oom_kills(), 1) << "the OOM killer did not end the stage";
  EXPECT_EQ(curl(server, "/health", std::nullopt).status, 503) << "health reports the failed stage";
  EXPECT_NE(server.log().find("stage " + std::to_string(c.stage)), std::string::npos) << "the failure is logged";

  std::optional<int> status = server.terminate(30s);
  ASSERT_TRUE(status.has_value()) << "serve did not exit within 30 s of SIGTERM after the fault";
  for (pid_t child : children) EXPECT_FALSE(process_exists(child)) << "process " << child << " outlived serve";
  EXPECT_TRUE(shm_entries("omnistage_" + server.session()).empty()) << "the session's segments are left";
  std::printf("%s stage %d %s: %d streams completed, %d failed naming the stage\n", c.arch.c_str(), c.stage,
              fault_name(c.fault), done, failed);
}

std::string case_name(const ::testing::TestParamInfo<FaultCase>& info) {
  const char* fault = info.param.fault == Fault::kKill ? "Kill" : info.param.fault == Fault::kStop ? "Stop" : "Oom";
  return info.param.arch + "_stage" + std::to_string(info.param.stage) + "_" + fault;
}

INSTANTIATE_TEST_SUITE_P(, StageFaultTest,
                         ::testing::Values(FaultCase{kQwen3, 0, Fault::kKill}, FaultCase{kQwen3, 0, Fault::kStop},
                                           FaultCase{kQwen3, 0, Fault::kOom}, FaultCase{kQwen3Tts, 0, Fault::kKill},
                                           FaultCase{kQwen3Tts, 0, Fault::kStop}, FaultCase{kQwen3Tts, 0, Fault::kOom},
                                           FaultCase{kQwen3Tts, 1, Fault::kKill}, FaultCase{kQwen3Tts, 1, Fault::kStop},
                                           FaultCase{kQwen3Tts, 1, Fault::kOom}),
                         case_name);

// The abort paths: clients that hang up mid-stream and clients whose own timeout cuts the
// stream leave nothing behind once the server shuts down.
TEST(ServeAbortPaths, DisconnectsAndTimeoutsLeaveNoProcessOrSegment) {
  TempDir dir;
  ServeProcess server(demo_model(kQwen3Tts), dir.path() / "serve.log");
  ASSERT_GT(server.port(), 0);
  const std::vector<pid_t> children = children_of(server.pid());
  std::vector<std::thread> clients;
  for (int i = 0; i < 16; ++i) {
    clients.emplace_back([&, i] {
      // Half hang up almost at once, half when their --max-time runs out mid-stream.
      curl(server, "/v1/audio/speech", stream_body(kQwen3Tts, i).dump(), {"--max-time", i % 2 ? "0.3" : "1.5"});
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(curl(server, "/health", std::nullopt).status, 200) << "aborted requests harm nothing";
  ASSERT_TRUE(server.terminate(30s).has_value());
  for (pid_t child : children) EXPECT_FALSE(process_exists(child)) << "process " << child << " outlived serve";
  EXPECT_TRUE(shm_entries("omnistage_" + server.session()).empty());
}

// A head killed with SIGKILL cannot clean up: its stage processes must notice and exit, and the
// next head to start removes the segments of dead owners (never those of a live one).
TEST(ServeHeadKill, StagesExitAndTheNextStartSweepsSegmentsOfDeadOwners) {
  TempDir dir;
  std::vector<pid_t> children;
  std::string killed_session;
  {
    ServeProcess head(demo_model(kQwen3Tts), dir.path() / "head.log");
    ASSERT_GT(head.port(), 0);
    children = children_of(head.pid());
    killed_session = head.session();
    ASSERT_FALSE(children.empty());
    std::thread client([&] { curl(head, "/v1/audio/speech", stream_body(kQwen3Tts, 0).dump(), {"--max-time", "5"}); });
    std::this_thread::sleep_for(1s);
    kill(head.pid(), SIGKILL);
    client.join();
  }  // reaps the head
  bool gone = false;
  for (auto deadline = Clock::now() + 10s; Clock::now() < deadline && !gone;) {
    gone = std::none_of(children.begin(), children.end(), process_exists);
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(gone) << "stage processes outlived their head by more than 10 s";
  // Segments as the killed head, a dead rank 0 (pids that cannot exist) and a live process (this
  // test) name them.
  const std::string dead = "/dev/shm/omnistage_" + killed_session + "_req-1_0_0@1";
  const std::string dead_tp = "/dev/shm/omnistage_tp_999999999_0";
  const std::string live = "/dev/shm/omnistage_" + std::to_string(getpid()) + "x00live_req-1_0_0@1";
  for (const std::string& path : {dead, dead_tp, live}) std::ofstream(path) << "stale";

  ServeProcess next(demo_model(kQwen3), dir.path() / "next.log");
  ASSERT_GT(next.port(), 0);
  EXPECT_FALSE(fs::exists(dead)) << "a dead head's segment survived the next start";
  EXPECT_TRUE(shm_entries("omnistage_" + killed_session).empty()) << "the killed head's session left segments";
  EXPECT_FALSE(fs::exists(dead_tp)) << "a dead rank's communicator survived the next start";
  EXPECT_TRUE(fs::exists(live)) << "a live process's segment was removed";
  fs::remove(live);
  // Which head swept is not asserted: tests run in parallel and every head sweeps at start, so
  // another test's head may have been first. StaleSegments (runtime_test) counts in a private
  // directory.
  ASSERT_TRUE(next.terminate(30s).has_value());
}

}  // namespace
}  // namespace omni::testing
