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

std::string_view replica_phase_name(ReplicaPhase phase) {
  switch (phase) {
    case ReplicaPhase::kStarting:
      return "starting";
    case ReplicaPhase::kRegistered:
      return "registered";
    case ReplicaPhase::kReady:
      return "ready";
    case ReplicaPhase::kFailed:
      return "failed";
    case ReplicaPhase::kStopped:
      return "stopped";
    case ReplicaPhase::kError:
      return "error";
    case ReplicaPhase::kDown:
      return "down";
    case ReplicaPhase::kDropped:
      return "dropped";
  }
  return "unknown";
}

LbPolicy lb_policy_from_name(std::string_view name) {
  if (name == "random") return LbPolicy::kRandom;
  if (name == "round-robin") return LbPolicy::kRoundRobin;
  if (name == "least-queue-length") return LbPolicy::kLeastQueueLength;
  throw_error(ErrorCode::kInvalidArgument,
              "--omni-lb-policy: unknown policy '{}'; the policies are random, round-robin, least-queue-length", name);
}

std::vector<int> consumers_of(const PipelineSpec& pipeline, int stage_id) {
  std::vector<int> consumers;
  for (const StageSpec& stage : pipeline.stages) {
    for (int from : stage.input_sources) {
      if (from == stage_id) consumers.push_back(stage.stage_id);
    }
  }
  return consumers;
}

ReplicaSet::ReplicaSet(const PipelineSpec& pipeline, std::optional<int> only_stage) : pipeline_(pipeline) {
  stages_.resize(pipeline_.stages.size());
  for (const StageSpec& stage : pipeline_.stages) {
    if (only_stage && stage.stage_id != *only_stage) continue;
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
    if (stages_[stage.stage_id].empty()) continue;  // its replicas join from headless workers
    int per_replica = stage.engine_args.value("tensor_parallel_size", 1);
    auto devices =
        replica_visible_devices(stage.stage_id, stage.devices, stage.num_replicas, per_replica, launch.visible_devices);
    StageLaunchConfig config{stage,
                             0,
                             launch.session,
                             launch.shm_threshold_bytes,
                             {},
                             static_cast<int>(launch.heartbeat_interval.count()),
                             launch.frontend_endpoints,
                             launch.retain_inputs,
                             std::nullopt};
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
  Replica* replica = lookup(identity);
  if (!replica) spdlog::warn("control message from unknown peer '{}' ignored", identity);
  return replica;
}

Replica* ReplicaSet::lookup(const std::string& identity) {
  auto it = by_identity_.find(identity);
  if (it == by_identity_.end()) return nullptr;
  return &stages_[it->second.first][it->second.second];
}

Replica& ReplicaSet::join(int stage_id, const std::string& identity, const RegisterMessage& message, bool other_host,
                          Clock::time_point now) {
  std::deque<Replica>& pool = stages_.at(stage_id);
  auto slot =
      std::find_if(pool.begin(), pool.end(), [](const Replica& r) { return r.phase == ReplicaPhase::kDropped; });
  if (slot == pool.end()) {
    slot = pool.emplace(pool.end());
    slot->index = static_cast<int>(pool.size()) - 1;
  } else {
    *slot = Replica{.index = slot->index};
  }
  Replica& replica = *slot;
  replica.stage_id = stage_id;
  replica.identity = identity;
  replica.joined = true;
  replica.address = message.address;
  replica.other_host = other_host;
  replica.phase = ReplicaPhase::kRegistered;
  replica.started = now;
  replica.last_heard = now;
  by_identity_[identity] = {stage_id, replica.index};
  spdlog::info("stage {} replica {}: a headless worker joined ({} on {}, pid {}{})", stage_id, replica.index, identity,
               message.address, message.pid, other_host ? ", another host: payloads travel inline" : "");
  return replica;
}

std::vector<Replica*> ReplicaSet::drop_gone(Clock::time_point now, std::chrono::milliseconds grace) {
  std::vector<Replica*> dropped;
  for (auto& stage : stages_) {
    for (Replica& replica : stage) {
      if (replica.phase != ReplicaPhase::kError && replica.phase != ReplicaPhase::kDown) continue;
      if (now - replica.gone_since < grace) continue;
      replica.phase = ReplicaPhase::kDropped;
      by_identity_.erase(replica.identity);
      dropped.push_back(&replica);
    }
  }
  return dropped;
}

std::vector<int> ReplicaSet::ready_counts() const {
  std::vector<int> counts(stages_.size(), 0);
  for (size_t s = 0; s < stages_.size(); ++s) {
    for (const Replica& replica : stages_[s]) counts[s] += replica.phase == ReplicaPhase::kReady ? 1 : 0;
  }
  return counts;
}

void ReplicaSet::on_startup_message(Replica& replica, const StageMessage& message, Clock::time_point now) {
  replica.last_heard = now;
  if (const auto* failed = std::get_if<InitFailedMessage>(&message)) {
    replica.init_failure = *failed;
  } else if (const auto* registered = std::get_if<RegisterMessage>(&message)) {
    replica.phase = ReplicaPhase::kRegistered;
    // A joined replica on another host has a pid of that host: nothing to watch here.
    if (!replica.process && !replica.other_host && (!replica.watch || replica.watch->pid() != registered->pid)) {
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
      if (replica.joined) continue;  // a pool's late joiner never holds up the start
      if (replica.phase != ReplicaPhase::kReady) return false;
    }
  }
  return true;
}

void ReplicaSet::check_startup(Clock::time_point now, std::chrono::milliseconds stage_init_timeout,
                               std::chrono::milliseconds exit_grace, const std::function<void()>& receive) {
  for (auto& stage : stages_) {
    for (Replica& replica : stage) {
      if (replica.phase == ReplicaPhase::kReady || replica.joined) continue;
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

int ReplicaSet::pick(int stage_id) {
  const std::deque<Replica>& replicas = stages_.at(stage_id);
  std::vector<int> ready;
  for (const Replica& replica : replicas) {
    if (replica.phase == ReplicaPhase::kReady) ready.push_back(replica.index);
  }
  if (ready.empty()) return -1;
  switch (policy_) {
    case LbPolicy::kRandom:
      return ready[std::uniform_int_distribution<size_t>(0, ready.size() - 1)(random_)];
    case LbPolicy::kRoundRobin: {
      size_t& next = next_round_robin_[stage_id];
      // The first ready index at or after the turn, so that a replica joining or leaving keeps the order.
      auto it = std::lower_bound(ready.begin(), ready.end(), static_cast<int>(next % replicas.size()));
      int chosen = it == ready.end() ? ready.front() : *it;
      next = static_cast<size_t>(chosen) + 1;
      return chosen;
    }
    case LbPolicy::kLeastQueueLength: {
      auto queue = [&](int index) {
        const Replica& r = replicas[index];
        return std::max<int64_t>(r.running_requests, static_cast<int64_t>(r.requests.size()));
      };
      int64_t least = queue(ready.front());
      for (int index : ready) least = std::min(least, queue(index));
      std::vector<int> tied;
      for (int index : ready) {
        if (queue(index) == least) tied.push_back(index);
      }
      return tied[std::uniform_int_distribution<size_t>(0, tied.size() - 1)(random_)];
    }
    case LbPolicy::kFewestHeld:
      break;
  }
  int best = ready.front();
  for (int index : ready) {
    if (replicas[index].requests.size() < replicas[best].requests.size()) best = index;
  }
  return best;
}

std::string ReplicaSet::fail(Replica& replica, const std::string& reason, std::set<std::string>& affected) {
  if (replica.phase != ReplicaPhase::kError && replica.phase != ReplicaPhase::kDown) {
    replica.phase = ReplicaPhase::kFailed;
  }
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
        // A joined replica's process is not ours to kill: it is ERROR, and back once it is heard.
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
      if (r.phase == ReplicaPhase::kDropped) continue;
      infos.push_back({r.stage_id, r.index, pid, r.phase == ReplicaPhase::kFailed, r.running_requests, r.phase,
                       r.address, r.requests_taken});
    }
  }
  return infos;
}

}  // namespace omni::runtime
