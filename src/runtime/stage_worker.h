// The inside of a stage replica process (`omnistage stage-worker`): connect to the head, register,
// build the stage's runner, then loop — take Submit/Abort/Shutdown messages, step the runner, send
// its outputs, with payloads through the edge connectors — until Shutdown, SIGTERM or SIGINT.
// One thread owns the runner and the socket.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "base/json.h"
#include "runtime/stage_spec.h"

namespace omni::runtime {

// Everything a replica process is started with, passed as JSON on its command line.
struct StageLaunchConfig {
  StageSpec stage;
  int replica = 0;
  std::string session;  // the head's connector session (connector.h)
  uint64_t shm_threshold_bytes = 65536;
  // The connector of each outgoing edge, by consumer stage id.
  std::map<int, ConnectorSpec> output_connectors;
  int heartbeat_interval_ms = 1000;
};

Json to_json(const StageLaunchConfig& config);
// Throws omni::Error(kInvalidConfig) naming `source` and the bad field.
StageLaunchConfig stage_launch_config_from_json(const Json& json, std::string_view source);

// Runs the replica and returns the process exit code: 0 after Shutdown or a termination signal;
// the init error's exit code when the runner cannot be built (after telling the head why); the
// error's exit code after a stage-fatal error. SIGTERM and SIGINT are blocked in the calling
// thread and received through a signalfd, so call this before starting other threads.
int run_stage_worker(const std::string& head_endpoint, const StageLaunchConfig& config);

}  // namespace omni::runtime
