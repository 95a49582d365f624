#include "runtime/replica_set.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "runtime/control_channel.h"
#include "runtime/device_assignment.h"
#include "runtime/stage_worker.h"

namespace omni::runtime {

namespace {

double seconds(std::chrono::milliseconds d) { return static_cast<double>(d.count()) / 1000.0; }

[[noreturn]] void startup_failure(const Replica& replica, const ExitStatus& status) {
  if (replica.init_failure) {
    throw Error(replica.init_failure->code,
                fmt::format("stage {} (replica {}) failed to start: {} (the stage process {})", replica.stage_id,
                            replica.index, replica.init_failure->message, status.describe()));
  }
  throw_error(ErrorCode::kUnavailable, "stage {} (replica {}) ended before it was ready: the stage process {}",
              replica.stage_id, replica.index, status.describe());
}

}  // namespace

std::vector<int> consumers_of(const PipelineSpec& pipeline, int stage_id) {
  std::vector<int> consumers;
  for (const StageSpec& stage : pipeline.stages) {
    for (int from : stage.input_sources) {
      if (from == stage_id) consumers.push_back(stage.stage_id);
    }
  }
  return consumers;
}

ReplicaSet::ReplicaSet(const PipelineSpec& pipeline) : pipeline_(pipeline) {
  stages_.resize(pipeline_.stages.size());
  for (const StageSpec& stage : pipeline_.stages) {
    for (int r = 0; r < stage.num_replicas; ++r) {
      Replica& replica = stages_[stage.stage_id].emplace_back();
      replica.stage_id = stage.stage_id;
      replica.index = r;
      replica.identity = replica_identity(stage.stage_id, r);
      by_identity_[replica.identity] = {stage.stage_id, r};
    }
  }
}

void ReplicaSet::launch(const ReplicaLaunch& launch) {
  for (const StageSpec& stage : pipeline_.stages) {
    int per_replica = stage.engine_args.value("tensor_parallel_size", 1);
    auto devices =
        replica_visible_devices(stage.stage_id, stage.devices, stage.num_replicas, per_replica, launch.visible_devices);
    StageLaunchConfig config{stage,
                             0,
                             launch.session,
                             launch.shm_threshold_bytes,
                             {},
                             static_cast<int>(launch.heartbeat_interval.count()),
                             launch.frontend_endpoints};
    for (int to : consumers_of(pipeline_, stage.stage_id)) {
      config.output_connectors[to] = edge_connector(pipeline_.stages[to], stage.stage_id);
    }
    for (Replica& replica : stages_[stage.stage_id]) {
      config.replica = replica.index;
      const std::optional<std::string>& visible = devices[replica.index];
      std::vector<std::string> env;
      if (visible) env.push_back("CUDA_VISIBLE_DEVICES=" + *visible);
      replica.started = Clock::now();
      replica.process = ChildProcess::spawn({launch.worker_program, "stage-worker", "--head", launch.head_endpoint,
                                             "--launch-config", to_json(config).dump()},
                                            env);
      spdlog::info("stage {} replica {}: started pid {}{}", stage.stage_id, replica.index, replica.process->pid(),
                   visible ? " with CUDA_VISIBLE_DEVICES=" + *visible : "");
    }
  }
}

Replica* ReplicaSet::find(const std::string& identity) {
  auto it = by_identity_.find(identity);
  if (it == by_identity_.end()) {
    spdlog::warn("control message from unknown peer '{}' ignored", identity);
    return nullptr;
  }
  return &stages_[it->second.first][it->second.second];
}

void ReplicaSet::on_startup_message(Replica& replica, const StageMessage& message, Clock::time_point now) {
  replica.last_heard = now;
  if (const auto* failed = std::get_if<InitFailedMessage>(&message)) {
    replica.init_failure = *failed;
  } else if (const auto* registered = std::get_if<RegisterMessage>(&message)) {
    replica.phase = ReplicaPhase::kRegistered;
    if (!replica.process && (!replica.watch || replica.watch->pid() != registered->pid)) {
      try {
        replica.watch.emplace(static_cast<pid_t>(registered->pid));
      } catch (const Error& e) {
        spdlog::warn("stage {} replica {}: {}", replica.stage_id, replica.index, e.what());
      }
    }
  } else if (std::holds_alternative<ReadyMessage>(message)) {
    replica.phase = ReplicaPhase::kReady;
    spdlog::info("stage {} replica {}: ready", replica.stage_id, replica.index);
  }
}

void ReplicaSet::on_heartbeat(Replica& replica, const HeartbeatMessage& heartbeat) {
  replica.running_requests = heartbeat.running_requests;
}

bool ReplicaSet::all_ready() const {
  for (const auto& stage : stages_) {
    for (const Replica& replica : stage) {
      if (replica.phase != ReplicaPhase::kReady) return false;
    }
  }
  return true;
}

void ReplicaSet::check_startup(Clock::time_point now, std::chrono::milliseconds stage_init_timeout,
                               std::chrono::milliseconds exit_grace, const std::function<void()>& receive) {
  for (auto& stage : stages_) {
    for (Replica& replica : stage) {
      if (replica.phase == ReplicaPhase::kReady) continue;
      if (replica.process) {
        if (replica.init_failure) startup_failure(replica, replica.process->wait_or_kill(std::chrono::seconds(5)));
        if (auto status = replica.process->poll()) {
          // An InitFailed sent just before the exit may still be on its way through the socket.
          auto deadline = Clock::now() + exit_grace;
          while (!replica.init_failure && Clock::now() < deadline) receive();
          startup_failure(replica, *status);
        }
      }
      if (now - replica.started > stage_init_timeout) {
        throw_error(ErrorCode::kTimeout, "stage {} (replica {}) was not ready within --stage-init-timeout={}s",
                    replica.stage_id, replica.index, seconds(stage_init_timeout));
      }
    }
  }
}

int ReplicaSet::pick(int stage_id) const {
  const std::vector<Replica>& replicas = stages_.at(stage_id);
  int best = -1;
  for (const Replica& replica : replicas) {
    if (replica.phase != ReplicaPhase::kReady) continue;
    if (best < 0 || replica.requests.size() < replicas[best].requests.size()) best = replica.index;
  }
  return best;
}

std::string ReplicaSet::fail(Replica& replica, const std::string& reason, std::set<std::string>& affected) {
  replica.phase = ReplicaPhase::kFailed;
  affected = std::move(replica.requests);
  replica.requests.clear();
  return fmt::format("stage {} (replica {}) failed: {}", replica.stage_id, replica.index, reason);
}

std::vector<ReplicaSet::Lapse> ReplicaSet::lapsed(Clock::time_point now, std::chrono::milliseconds heartbeat_timeout) {
  std::vector<Lapse> lapses;
  for (auto& stage : stages_) {
    for (Replica& replica : stage) {
      if (replica.phase != ReplicaPhase::kReady) continue;
      if (replica.process) {
        if (auto status = replica.process->poll()) {
          lapses.push_back({&replica, "its process " + status->describe(), true});
          continue;
        }
      } else if (replica.watch && replica.watch->ended()) {
        lapses.push_back({&replica, fmt::format("its process (pid {}) ended", replica.watch->pid()), true});
        continue;
      }
      if (now - replica.last_heard > heartbeat_timeout) {
        if (replica.process) replica.process->signal_group(SIGKILL);
        lapses.push_back({&replica, fmt::format("it sent no heartbeat for {}s", seconds(heartbeat_timeout)), false});
      }
    }
  }
  return lapses;
}

void ReplicaSet::stop_all(std::chrono::milliseconds grace) {
  auto deadline = Clock::now() + grace;
  for (auto& stage : stages_) {
    for (Replica& replica : stage) {
      if (!replica.process) continue;
      auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                           std::chrono::milliseconds(0));
      ExitStatus status = replica.process->wait_or_kill(left);
      if (replica.phase != ReplicaPhase::kFailed) replica.phase = ReplicaPhase::kStopped;
      spdlog::debug("stage {} replica {}: {}", replica.stage_id, replica.index, status.describe());
    }
  }
}

std::vector<ReplicaInfo> ReplicaSet::infos() const {
  std::vector<ReplicaInfo> infos;
  for (const auto& stage : stages_) {
    for (const Replica& r : stage) {
      pid_t pid = r.process ? r.process->pid() : r.watch ? r.watch->pid() : -1;
      infos.push_back({r.stage_id, r.index, pid, r.phase == ReplicaPhase::kFailed, r.running_requests});
    }
  }
  return infos;
}

}  // namespace omni::runtime
