// `serve … --api-server-count N` (N > 1): one launcher process and N API frontend processes.
//
// The launcher resolves the configuration, starts every stage replica once (its orchestrator:
// api_frontends = N, runtime/orchestrator.h), reserves the listening address (--host/--port, with
// SO_REUSEPORT; server/port_reservation.h) and starts N frontends: the same binary and command
// line, told their role through the environment variable OMNISTAGE_API_FRONTEND (internal). Each
// frontend loads the tokenizer and chat template, attaches its own orchestrator to every replica,
// listens on the shared address with SO_REUSEPORT (the kernel spreads connections over the
// frontends) and answers its own requests; /metrics merges every frontend's series
// (server/frontend_metrics.h). A frontend is serving once it has written its first metrics
// snapshot; the launcher logs "ready on" when all are. A frontend that ends is started again and
// the replicas drop its requests (the others' requests go on); a stage replica that ends fails its
// requests in every frontend, naming the stage, as with one frontend. SIGINT/SIGTERM stop the
// frontends (they drain), then the replicas.
#pragma once

#include <optional>

#include "cli/serve_flags.h"
#include "runtime/orchestrator.h"
#include "runtime/stage_spec.h"

namespace omni::cli {

// This process's role when the launcher started it as a frontend, from OMNISTAGE_API_FRONTEND;
// nullopt for a process started by a user. Throws omni::Error(kInvalidArgument) for a malformed value.
struct ApiFrontendRole {
  runtime::FrontendAttach attach;
  uint16_t port = 0;  // the launcher's reserved port
};
std::optional<ApiFrontendRole> api_frontend_role();

// The combinations multiple frontends cannot serve, beyond the flag rules of serve_flags.cc: a
// diffusion stage, a stage with data_parallel_size > 1 or with enable_sleep_mode. Throws
// omni::Error(kInvalidArgument) naming --api-server-count and the stage.
void check_api_frontends_config(const config::EffectiveConfig& config);

// Runs the launcher until SIGINT/SIGTERM; returns the exit code. `options` are the orchestrator's
// (timeouts, thresholds); the stages start before this returns an error for them.
int run_api_frontend_launcher(const ServeFlags& flags, const runtime::PipelineSpec& pipeline,
                              runtime::OrchestratorOptions options, int count);

}  // namespace omni::cli
