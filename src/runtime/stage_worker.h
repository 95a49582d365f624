// The inside of a stage replica process (`omnistage stage-worker`): connect to the head, register,
// build the stage's runner, then loop — take Submit/Abort/Shutdown messages, step the runner, send
// its outputs, with payloads through the edge connectors — until Shutdown, SIGTERM or SIGINT.
// One thread owns the runner and the sockets.
//
// With API frontends (frontend_endpoints, serve --api-server-count N) the head is the launcher
// (start-up, heartbeats, Shutdown, FrontendReset) and the requests come from the frontends: the
// replica connects one more channel to each, registers there once ready, and answers each request
// on the channel it came from. One runner serves every frontend's requests in the same batches.
//
// Sleep mode: a Sleep ends the running requests (kUnavailable naming the stage), then level 1
// calls the runner's sleep() and level 2 destroys the runner (its weights go with it) and builds it
// again on WakeUp. While asleep a Submit is answered with kUnavailable naming the stage.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

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
  // The API frontends' control endpoints, by frontend index; empty when the head serves requests.
  std::vector<std::string> frontend_endpoints;
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
