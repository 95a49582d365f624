// serve's distributed stage launch (vLLM-Omni's --stage-id / --headless): which role this process
// has, the pipeline it serves (its own CLI flags override its own stage only), the head's
// orchestrator settings, and the headless worker, which launches --omni-dp-size-local replicas of
// its stage that join the head's pool (runtime/distributed_launch.h, docs/distributed.md).
#pragma once

#include <optional>
#include <string>

#include "base/json.h"
#include "cli/serve_flags.h"
#include "runtime/orchestrator.h"
#include "runtime/stage_spec.h"

namespace omni::cli {

struct DistributedRole {
  int stage_id = 0;
  bool headless = false;
  std::string master_address;
  int master_port = 0;
  std::string replica_address;  // --omni-replica-address; empty: the routing probe picks it
  int dp_size_local = 1;

  std::string master_endpoint() const;  // tcp://A:P
};

// The role --stage-id gives this process; nullopt without it (a single-process launch).
std::optional<DistributedRole> distributed_role(const ServeFlags& flags);

// The pipeline a process of a distributed launch serves: every stage as the pipeline and deploy
// YAML resolve it without this process's CLI stage flags, except its own stage, which is `full`'s
// (with them) and gets --omni-dp-size-local replicas. `fingerprint` is set to what the head and
// its workers compare at registration.
runtime::PipelineSpec stage_local_pipeline(const ServeFlags& flags, const runtime::PipelineSpec& full,
                                           const DistributedRole& role, Json& fingerprint);

// The replica pool flags of any launch: the heartbeat timers, and --omni-lb-policy when given (a
// single-process launch without it keeps picking the replica holding the fewest requests).
void apply_pool_flags(const ServeFlags& flags, runtime::OrchestratorOptions& options);

// The head's orchestrator settings: the master's control endpoint, the pool (--omni-lb-policy
// with its default), the grace period.
void configure_distributed_head(const ServeFlags& flags, const DistributedRole& role, Json fingerprint,
                                runtime::OrchestratorOptions& options);

// serve --headless: starts the replicas of the role's stage (each a stage-worker process that
// joins the head's pool) and waits. Returns 0 after SIGTERM/SIGINT (the replicas leave the pool
// first); when a replica process ends, the others are stopped and its exit code is returned (a
// process supervisor such as Kubernetes starts the worker again).
int run_headless_worker(const ServeFlags& flags, const runtime::PipelineSpec& pipeline, const Json& fingerprint,
                        const DistributedRole& role, const runtime::OrchestratorOptions& options);

}  // namespace omni::cli
