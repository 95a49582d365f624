#include "cli/distributed_serve.h"

#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "runtime/child_process.h"
#include "runtime/device_assignment.h"
#include "runtime/pipeline_from_config.h"
#include "runtime/replica_set.h"
#include "runtime/stage_worker.h"
#include "runtime/termination_signals.h"

namespace omni::cli {

namespace {

std::chrono::milliseconds seconds_value(const ServeFlags& flags, const std::string& dest) {
  return std::chrono::milliseconds(std::llround(flags.values[dest].get<double>() * 1000.0));
}

}  // namespace

std::string DistributedRole::master_endpoint() const { return fmt::format("tcp://{}:{}", master_address, master_port); }

std::optional<DistributedRole> distributed_role(const ServeFlags& flags) {
  if (!flags.was_given("stage_id")) return std::nullopt;
  DistributedRole role;
  role.stage_id = static_cast<int>(flags.values["stage_id"].get<int64_t>());
  role.headless = flags.was_given("headless");
  role.master_address = flags.values["omni_master_address"].get<std::string>();
  role.master_port = static_cast<int>(flags.values["omni_master_port"].get<int64_t>());
  if (flags.values["omni_replica_address"].is_string()) {
    role.replica_address = flags.values["omni_replica_address"].get<std::string>();
  }
  role.dp_size_local = static_cast<int>(flags.values["omni_dp_size_local"].get<int64_t>());
  return role;
}

runtime::PipelineSpec stage_local_pipeline(const ServeFlags& flags, const runtime::PipelineSpec& full,
                                           const DistributedRole& role, Json& fingerprint) {
  if (role.stage_id >= static_cast<int>(full.stages.size())) {
    throw_error(ErrorCode::kInvalidArgument, "--stage-id {}: the pipeline has no such stage (its stages are 0..{})",
                role.stage_id, full.stages.size() - 1);
  }
  ServeFlags base = flags;
  for (const FlagSpec& spec : serve_flag_specs()) {
    if (spec.target == FlagTarget::kStage) base.given.erase(spec.dest);
  }
  runtime::PipelineSpec pipeline =
      runtime::pipeline_spec_from_config(runtime::servable_stages(build_config(base)).config);
  fingerprint = runtime::pipeline_fingerprint(pipeline);
  pipeline.stages.at(role.stage_id) = full.stages.at(role.stage_id);
  pipeline.stages.at(role.stage_id).num_replicas = role.dp_size_local;
  pipeline.model_facts = full.model_facts;
  return pipeline;
}

void apply_pool_flags(const ServeFlags& flags, runtime::OrchestratorOptions& options) {
  options.heartbeat_timeout = seconds_value(flags, "omni_heartbeat_timeout");
  options.heartbeat_interval = seconds_value(flags, "omni_heartbeat_interval");
  if (flags.was_given("omni_lb_policy")) {
    options.lb_policy = runtime::lb_policy_from_name(flags.values["omni_lb_policy"].get<std::string>());
  }
}

void configure_distributed_head(const ServeFlags& flags, const DistributedRole& role, Json fingerprint,
                                runtime::OrchestratorOptions& options) {
  options.control_endpoint = role.master_endpoint();
  options.distributed =
      runtime::DistributedHead{role.stage_id, std::move(fingerprint), seconds_value(flags, "omni_replica_grace")};
  options.lb_policy = runtime::lb_policy_from_name(flags.values["omni_lb_policy"].get<std::string>());
  spdlog::info(
      "serve: head of a distributed launch: stage {} here ({} replica(s)), master {} (the other stages' "
      "replicas register there), --omni-lb-policy {}, heartbeat timeout {}s",
      role.stage_id, role.dp_size_local, options.control_endpoint, flags.values["omni_lb_policy"].get<std::string>(),
      static_cast<double>(options.heartbeat_timeout.count()) / 1000.0);
}

int run_headless_worker(const ServeFlags& flags, const runtime::PipelineSpec& pipeline, const Json& fingerprint,
                        const DistributedRole& role, const runtime::OrchestratorOptions& options) {
  const runtime::StageSpec& stage = pipeline.stages.at(role.stage_id);
  const std::string address = role.replica_address.empty()
                                  ? runtime::routing_probe_address(role.master_address, role.master_port)
                                  : role.replica_address;
  runtime::StageLaunchConfig config;
  config.stage = stage;
  config.replica = -1;
  config.shm_threshold_bytes = options.shm_threshold_bytes;
  config.heartbeat_interval_ms = static_cast<int>(seconds_value(flags, "omni_heartbeat_interval").count());
  config.join = runtime::StageJoin{address, fingerprint, static_cast<int>(options.stage_init_timeout.count())};
  for (int to : runtime::consumers_of(pipeline, stage.stage_id)) {
    config.output_connectors[to] = runtime::edge_connector(pipeline.stages[to], stage.stage_id);
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const auto devices = runtime::replica_visible_devices(stage.stage_id, stage.devices, role.dp_size_local,
                                                        stage.engine_args.value("tensor_parallel_size", 1),
                                                        visible ? std::optional<std::string>(visible) : std::nullopt);

  // Before the replicas start, so that SIGINT/SIGTERM reach this thread's wait below.
  runtime::TerminationSignals signals;
  std::vector<runtime::ChildProcess> replicas;
  for (int r = 0; r < role.dp_size_local; ++r) {
    std::vector<std::string> env;
    if (devices[r]) env.push_back("CUDA_VISIBLE_DEVICES=" + *devices[r]);
    replicas.push_back(runtime::ChildProcess::spawn({"/proc/self/exe", "stage-worker", "--head", role.master_endpoint(),
                                                     "--launch-config", runtime::to_json(config).dump()},
                                                    env));
    spdlog::info("serve: headless stage {}: local replica {} started (pid {}{}), registering with {} as {}",
                 stage.stage_id, r, replicas.back().pid(), devices[r] ? ", CUDA_VISIBLE_DEVICES=" + *devices[r] : "",
                 role.master_endpoint(), address);
  }
  auto stop_all = [&](std::chrono::milliseconds grace) {
    for (runtime::ChildProcess& replica : replicas) replica.signal_group(SIGTERM);
    for (runtime::ChildProcess& replica : replicas) replica.wait_or_kill(grace);
  };
  while (true) {
    pollfd wait{signals.fd(), POLLIN, 0};
    poll(&wait, 1, 200);
    if (int signal = signals.take()) {
      spdlog::info("serve: headless stage {}: {} received, stopping its replicas", stage.stage_id, strsignal(signal));
      stop_all(options.shutdown_grace);
      return 0;
    }
    for (size_t r = 0; r < replicas.size(); ++r) {
      if (auto status = replicas[r].poll()) {
        spdlog::error("serve: headless stage {}: replica process {} (pid {}) {}; stopping the others", stage.stage_id,
                      r, replicas[r].pid(), status->describe());
        stop_all(options.shutdown_grace);
        return status->signal ? 128 + status->signal : status->code;
      }
    }
  }
}

}  // namespace omni::cli
