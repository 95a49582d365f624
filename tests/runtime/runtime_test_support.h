// Helpers for the runtime's process tests: test-echo pipelines, an event collector, and checks
// for leftover child processes and shared-memory segments.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/orchestrator.h"
#include "runtime/serving_backend.h"
#include "runtime/stage_spec.h"

namespace omni::runtime::testing {

// Stage `id` running the test-echo runner with `echo` merged into its engine args.
StageSpec echo_stage(int id, std::vector<int> input_sources, bool final_output, std::string type,
                     const Json& echo = {});

// Options with the omnistage binary under test and timeouts short enough for tests.
OrchestratorOptions test_options();

// Records every event of every request; thread-safe.
class EventLog {
 public:
  EventSink sink(const std::string& request_id);
  // Waits until `request_id` got its finished event; false after `timeout`.
  bool wait_finished(const std::string& request_id, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Waits until `request_id` got at least one event.
  bool wait_any(const std::string& request_id, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  std::vector<ResponseEvent> events(const std::string& request_id);
  std::vector<int32_t> tokens(const std::string& request_id);
  ResponseEvent last(const std::string& request_id);
  // Request ids in the order their events arrived, one entry per event.
  std::vector<std::string> order();

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<ResponseEvent>> events_;
  std::vector<std::string> order_;
};

// Processes whose parent is this process (including zombies not yet reaped).
std::vector<pid_t> child_pids();
// /dev/shm entries of `session`.
std::vector<std::string> session_segments(const std::string& session);
// Polls `condition` every 10 ms until it holds or `timeout` passes.
bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace omni::runtime::testing
