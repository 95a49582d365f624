#include "runtime/runtime_test_support.h"

#include <dirent.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace omni::runtime::testing {

StageSpec echo_stage(int id, std::vector<int> input_sources, bool final_output, std::string type, const Json& echo) {
  StageSpec stage;
  stage.stage_id = id;
  stage.input_sources = std::move(input_sources);
  stage.final_output = final_output;
  stage.final_output_type = std::move(type);
  stage.engine_args = {{"runner", "test-echo"}};
  if (echo.is_object()) stage.engine_args.update(echo);
  return stage;
}

OrchestratorOptions test_options() {
  OrchestratorOptions options;
  options.worker_program = OMNISTAGE_TEST_BINARY;
  options.stage_init_timeout = std::chrono::seconds(20);
  options.init_timeout = std::chrono::seconds(30);
  options.heartbeat_interval = std::chrono::milliseconds(100);
  options.shutdown_grace = std::chrono::seconds(3);
  return options;
}

EventSink EventLog::sink(const std::string& request_id) {
  return [this, request_id](ResponseEvent event) {
    std::lock_guard lock(mutex_);
    events_[request_id].push_back(std::move(event));
    order_.push_back(request_id);
    changed_.notify_all();
  };
}

bool EventLog::wait_finished(const std::string& request_id, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] {
    auto it = events_.find(request_id);
    return it != events_.end() && !it->second.empty() && it->second.back().finished;
  });
}

bool EventLog::wait_any(const std::string& request_id, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return events_.count(request_id) > 0; });
}

std::vector<ResponseEvent> EventLog::events(const std::string& request_id) {
  std::lock_guard lock(mutex_);
  return events_[request_id];
}

std::vector<int32_t> EventLog::tokens(const std::string& request_id) {
  std::vector<int32_t> tokens;
  for (const ResponseEvent& e : events(request_id)) tokens.insert(tokens.end(), e.token_ids.begin(), e.token_ids.end());
  return tokens;
}

ResponseEvent EventLog::last(const std::string& request_id) {
  auto all = events(request_id);
  return all.empty() ? ResponseEvent{} : all.back();
}

std::vector<std::string> EventLog::order() {
  std::lock_guard lock(mutex_);
  return order_;
}

std::vector<pid_t> child_pids() {
  std::vector<pid_t> children;
  pid_t self = getpid();
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid …; comm may contain spaces, so read after the last ')'.
    std::istringstream rest(line.substr(line.rfind(')') + 1));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == self) children.push_back(std::stoi(name));
  }
  return children;
}

std::vector<std::string> session_segments(const std::string& session) {
  std::vector<std::string> names;
  std::string prefix = "omnistage_" + session + "_";
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    std::string name = entry.path().filename();
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  return names;
}

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace omni::runtime::testing
