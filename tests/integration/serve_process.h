// `omnistage serve` as a child process for the integration tests: one server on a free loopback
// port (--port 0, the port read from its log), curl against it with the API key, and the
// process and shared-memory checks of a clean shutdown. Not thread-safe per ServeProcess.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/json.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace omni::testing {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

inline constexpr const char* kApiKey = "integration-key";
inline constexpr const char* kModelName = "demo";

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The processes whose parent is `parent`.
inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat = read_file(entry.path() / "stat");
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(std::stoi(name));
  }
  return out;
}

inline bool process_exists(pid_t pid) { return kill(pid, 0) == 0; }

inline std::vector<std::string> shm_entries(const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator("/dev/shm")) {
    if (entry.path().filename().string().starts_with(prefix)) out.push_back(entry.path().filename());
  }
  return out;
}

struct HttpResult {
  int status = 0;
  std::string body;
};

// One `omnistage serve` process on a free loopback port, its log in a file.
class ServeProcess {
 public:
  // `env`: "NAME=value" entries added to the server's environment; `with_api_key`: pass --api-key kApiKey.
  ServeProcess(const fs::path& model, const fs::path& log, std::vector<std::string> extra = {},
               std::vector<std::string> env = {}, bool with_api_key = true)
      : log_(log) {
    std::vector<std::string> args = {
        OMNISTAGE_BINARY,      "serve",    model.string(),   "--host", "127.0.0.1", "--port", "0",
        "--served-model-name", kModelName, "--max-num-seqs", "64"};
    if (with_api_key) args.insert(args.end(), {"--api-key", kApiKey});
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = fork();
    if (pid_ == 0) {
      for (std::string& entry : env) putenv(entry.data());
      FILE* out = freopen(log.c_str(), "w", stdout);
      if (out == nullptr || dup2(fileno(stdout), STDERR_FILENO) < 0) _exit(127);
      std::vector<char*> argv;
      for (std::string& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    const std::regex ready(R"(ready on http://127\.0\.0\.1:(\d+))");
    const std::regex session(R"(session (\S+),)");
    for (auto deadline = std::chrono::steady_clock::now() + 60s; std::chrono::steady_clock::now() < deadline;) {
      const std::string text = read_file(log_);
      std::smatch m;
      if (std::regex_search(text, m, session)) session_ = m[1];
      if (std::regex_search(text, m, ready)) {
        port_ = std::stoi(m[1]);
        return;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(50ms);
    }
    ADD_FAILURE() << "serve did not become ready; its log:\n" << read_file(log_);
  }

  ~ServeProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // SIGTERM, then waits up to `timeout`; the exit status, or nullopt when it did not exit.
  std::optional<int> terminate(std::chrono::milliseconds timeout) {
    kill(pid_, SIGTERM);
    for (auto deadline = std::chrono::steady_clock::now() + timeout; std::chrono::steady_clock::now() < deadline;) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(20ms);
    }
    return std::nullopt;
  }

  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  const std::string& session() const { return session_; }
  std::string log() const { return read_file(log_); }

 private:
  fs::path log_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string session_;
};

// curl with the API key; `extra` are more curl arguments.
inline HttpResult curl(const ServeProcess& server, const std::string& path, const std::optional<std::string>& body,
                       std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {"/usr/bin/curl",  "-sS", "-N",
                                   "--max-time",     "60",  "-w",
                                   "\n%{http_code}", "-H",  std::string("Authorization: Bearer ") + kApiKey};
  if (body) {
    argv.insert(argv.end(), {"-H", "Content-Type: application/json", "--data-binary", *body});
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(server.url(path));
  ProcessResult result = run_process(argv);
  HttpResult out;
  size_t split = result.out.rfind('\n');
  if (split == std::string::npos) return out;
  out.body = result.out.substr(0, split);
  out.status = std::atoi(result.out.c_str() + split + 1);
  return out;
}

// The data lines of an SSE body, parsed, up to [DONE].
// The value of a series (its name and labels, as /metrics prints them) in a /metrics text; -1 when
// absent.
inline double metric_series(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

inline std::vector<Json> sse_events(const std::string& body) {
  std::vector<Json> events;
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("data: ")) continue;
    std::string data = line.substr(6);
    if (data == "[DONE]") break;
    events.push_back(Json::parse(data));
  }
  return events;
}

// A test suite sharing one server: `omnistage demo-model --arch Arch` written into a temporary
// folder and served there, started before the suite's first test and stopped after its last.
// Arch names a static string (e.g. `inline constexpr char kArch[] = "qwen3";`).
template <const char* Arch>
class DemoServerSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    ProcessResult made =
        run_process({OMNISTAGE_BINARY, "demo-model", "--arch", Arch, "--out", (dir_->path() / "model").string()});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    server_ = std::make_unique<ServeProcess>(dir_->path() / "model", dir_->path() / "serve.log");
  }
  static void TearDownTestSuite() {
    server_.reset();
    dir_.reset();
  }
  void SetUp() override { ASSERT_GT(server_->port(), 0) << "the server is not running"; }

  static inline std::unique_ptr<TempDir> dir_;
  static inline std::unique_ptr<ServeProcess> server_;
};

}  // namespace omni::testing
