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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"
#include "runtime/stage_spec.h"

namespace omni::runtime {

// A headless worker's replica (serve --headless): it joins the head's pool of its stage instead of
// being one of the head's own replicas. It registers with replica -1 and this, is told its index,
// the head's session and how its payloads travel (JoinReplyMessage), and registers again when the
// head asks (a restarted head). A refused registration ends the process with kInvalidConfig.
struct StageJoin {
  std::string address;                  // advertised to the head (--omni-replica-address or the routing probe)
  Json pipeline;                        // the pipeline the worker resolved (distributed_launch.h pipeline_fingerprint)
  int stage_init_timeout_ms = 300'000;  // how long to keep registering before giving up
};

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
  // A distributed launch: consumers keep the payloads they read until the head discards them.
  bool retain_inputs = false;
  std::optional<StageJoin> join;  // set for a headless worker's replica
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
