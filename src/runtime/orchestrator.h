// The head of a pipeline: starts one child process per stage replica (`omnistage stage-worker`),
// routes each request through the stages its output modalities need, and streams the final
// stage's output to the request's EventSink. Implements ServingBackend for the HTTP server.
//
// Ownership and threads: the orchestrator owns its thread, the control socket, the replica
// processes and every request's routing state. submit(), abort(), healthy() and shutdown() may be
// called from any thread and only enqueue or read state under a short lock (shutdown() also
// joins the thread); the orchestrator thread alone talks to stages and calls sinks (one request's
// events in order, never concurrently). Replica processes are started from that thread and receive
// SIGKILL if it ends without shutting them down. That thread blocks SIGINT and SIGTERM: handling
// them is the process owner's job (runtime/termination_signals.h, then shutdown()).
//
// With API frontends (serve --api-server-count N) there is one launcher and N attached heads: the
// launcher's orchestrator (api_frontends = N) starts the replicas and tells them the frontends'
// control endpoints, serves no request and resets a frontend's channels when it ends; each
// frontend's orchestrator (attach) starts no process, binds its own endpoint and takes the
// replicas once each has registered there, then routes its own requests exactly as a single head
// does. It watches the replicas' pids (runtime/child_process.h ProcessWatch) and leaves the
// session's shared memory and the replicas' shutdown to the launcher.
//
// Routing (full-payload and async_chunk, with each edge's in-flight limit) is request_router.h's;
// the replicas' lifecycle (start, ready, heartbeats, failure, which replica takes a request) is
// replica_set.h's; the orchestrator's thread only dispatches commands and messages to them.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/metrics.h"
#include "runtime/distributed_launch.h"
#include "runtime/replica_set.h"
#include "runtime/serving_backend.h"
#include "runtime/stage_spec.h"

namespace omni::runtime {

// The control endpoint of API frontend `index` of the launcher whose session is `session`.
std::string frontend_control_endpoint(const std::string& session, int index);

// An orchestrator of an API frontend: it attaches to the replicas of the launcher's session.
struct FrontendAttach {
  std::string session;  // the launcher's (its shared-memory segments' prefix)
  int index = 0;        // this frontend's, 0..count-1
  int count = 1;
};

struct OrchestratorOptions {
  // The omnistage binary the replicas run (its `stage-worker` subcommand).
  std::string worker_program = "/proc/self/exe";
  // Where the head's control socket binds: empty for a private abstract IPC socket, or e.g.
  // "tcp://127.0.0.1:*" (any free port) for the TCP transport that remote stages use.
  std::string control_endpoint;
  std::chrono::milliseconds stage_init_timeout{300'000};  // --stage-init-timeout
  std::chrono::milliseconds init_timeout{600'000};        // --init-timeout
  uint64_t shm_threshold_bytes = 65536;                   // --shm-threshold-bytes
  int edge_inflight_limit = 64;  // requests in flight across one edge at most (request_router.h)
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds heartbeat_timeout{30'000};  // a ready replica silent this long has failed
  std::chrono::milliseconds shutdown_grace{5000};       // then SIGKILL
  // Where the orchestrator's series go (GET /metrics), or none. Must outlive the orchestrator.
  //   omnistage:orchestrator_dispatch_seconds: submit() called to the request sent to its entry stage.
  //   omnistage:stage_hop_seconds{stage}: per request and stage, the head's time from sending the
  //     request to handling its first output there, less the worker's own time in between — the
  //     control-message transport both ways plus the waits in the two event loops: a busy stage
  //     takes a new request only between engine steps, and after the requests queued ahead of it
  //     (each one's add_request, see omnistage:stage_step_seconds{part="add_request"}); the worker's
  //     own time starts when it takes the request.
  //   omnistage:stage_step_seconds{stage, part}: the stage worker's step timings (heartbeats).
  MetricsRegistry* metrics = nullptr;
  // A launcher of this many API frontends (0: none, this head serves the requests itself).
  int api_frontends = 0;
  // Set for an API frontend's orchestrator (then worker_program, control_endpoint and
  // api_frontends are not used).
  std::optional<FrontendAttach> attach;
  // Set for the head of a distributed launch (distributed_launch.h): it launches its own stage's
  // replicas only, the other stages' join from headless workers on control_endpoint (tcp://A:P);
  // a failed replica is ERROR or DOWN and leaves its pool (its requests are replayed, see
  // RequestRouter::replica_lost) instead of failing the server, and a stage without a ready
  // replica makes /health 503 and its new requests kUnavailable, both naming the stage. Its series:
  //   omnistage:stage_replicas{stage, state}: the stage's replicas by state (ready, error, down…).
  //   omnistage:replica_queue_length{stage, replica}: running requests, as of its last heartbeat.
  //   omnistage:replica_requests_taken{stage, replica}: the requests the head sent it.
  std::optional<DistributedHead> distributed;
  LbPolicy lb_policy = LbPolicy::kFewestHeld;  // --omni-lb-policy
};

class Orchestrator final : public ServingBackend {
 public:
  // Validates the pipeline and connectors, starts every replica and returns once all are ready.
  // Throws omni::Error: kInvalidConfig for the pipeline or a connector; a stage's own error code
  // and message ("stage 1 (replica 0) failed to start: …") when it fails to initialise; kTimeout
  // naming the stage and the flag when a stage is not ready in time; kUnavailable when a stage
  // process dies before it is ready. After a throw no replica process is left.
  Orchestrator(PipelineSpec pipeline, OrchestratorOptions options);
  ~Orchestrator() override;

  void submit(GenerationRequest request, EventSink sink) override;
  void abort(const std::string& request_id) override;
  bool healthy() const override;
  std::string unhealthy_reason() const override;
  void sleep(std::vector<int> stage_ids, int level, StageControlDone done) override;
  void wake_up(std::vector<int> stage_ids, StageControlDone done) override;
  std::vector<int> sleeping_stages() const override;

  // A launcher's: API frontend `index` ended; its replicas drop its requests and wait on a new
  // channel for the frontend started in its place.
  void reset_frontend(int index);

  // Ends every live request (an error event, kUnavailable), asks the replicas to exit, kills those
  // still running after shutdown_grace, and removes this session's shared-memory segments.
  // Idempotent; blocks until done. Must not be called from an EventSink.
  void shutdown();

  using ReplicaInfo = runtime::ReplicaInfo;
  std::vector<ReplicaInfo> replicas() const;
  // The endpoint replicas connect to, and the prefix of this head's shared-memory segments.
  std::string control_endpoint() const;
  std::string session() const;

 private:
  class Loop;
  std::unique_ptr<Loop> loop_;
};

}  // namespace omni::runtime
