// The replicas of every stage of one pipeline and their lifecycle: started (a child process per
// replica, `omnistage stage-worker`), registered, ready, failed or stopped; which requests each
// holds; which one takes the next request of a stage. The orchestrator's routing asks it for a
// replica and tells it which requests a replica holds; the orchestrator's loop feeds it what the
// replicas report (register, ready, init failure, heartbeats) and asks it which have lapsed.
//
// It owns the replica processes but no socket: sending to a replica is the caller's business (the
// identity names the replica on the control channel). A replica object without a process (never
// launched) is fully usable for the state machine, which is how the unit tests drive it.
//
// Threads: one thread (the orchestrator's) uses an object. Replica processes are spawned from that
// thread, because they die with it (child_process.h).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/child_process.h"
#include "runtime/stage_protocol.h"
#include "runtime/stage_spec.h"

namespace omni::runtime {

// kStarting → kRegistered → kReady, from any state → kFailed; kStopped once the head stopped it.
// Only a kReady replica takes requests. A pool of a distributed launch (distributed_launch.h)
// instead has a failed replica kError (silent past the heartbeat timeout; a heartbeat makes it
// kReady again) or kDown (it left, or its process ended), and kDropped once it was gone longer
// than the grace period (its slot is free for a replica that joins).
enum class ReplicaPhase { kStarting, kRegistered, kReady, kFailed, kStopped, kError, kDown, kDropped };

// The phase's name in logs and /metrics ("ready", "error", "down"…).
std::string_view replica_phase_name(ReplicaPhase phase);

// How a stage's next request picks among its ready replicas (--omni-lb-policy). kFewestHeld is
// the single-host default: the replica holding the fewest of the head's requests.
enum class LbPolicy { kFewestHeld, kRandom, kRoundRobin, kLeastQueueLength };
// "random", "round-robin", "least-queue-length"; throws omni::Error(kInvalidArgument) otherwise.
LbPolicy lb_policy_from_name(std::string_view name);

struct Replica {
  using Clock = std::chrono::steady_clock;

  int stage_id = 0;
  int index = 0;
  std::string identity;  // its routing id on the control channel (replica_identity())
  std::optional<ChildProcess> process;
  // A replica another process started (an API frontend's): its process, watched from its Register.
  std::optional<ProcessWatch> watch;
  ReplicaPhase phase = ReplicaPhase::kStarting;
  Clock::time_point started;
  Clock::time_point last_heard;
  std::set<std::string> requests;  // the requests the head has on this replica
  std::optional<InitFailedMessage> init_failure;
  int64_t running_requests = 0;  // as of its last heartbeat
  // A headless worker's replica (it joined the pool; no process of the head's): its advertised
  // address, and whether it is on another host than the head (its payloads travel inline).
  bool joined = false;
  std::string address;
  bool other_host = false;
  Clock::time_point gone_since;  // when it became kError or kDown
  int64_t requests_taken = 0;    // requests the head sent it, in all
};

// A snapshot of one replica for callers outside the orchestrator thread.
struct ReplicaInfo {
  int stage_id = 0;
  int replica = 0;
  pid_t pid = -1;
  bool failed = false;
  int64_t running_requests = 0;  // as of the replica's last heartbeat
  ReplicaPhase phase = ReplicaPhase::kStarting;
  std::string address;  // a joined replica's advertised address
  int64_t requests_taken = 0;
};

// How replica processes are started.
struct ReplicaLaunch {
  std::string worker_program;  // the omnistage binary (its `stage-worker` subcommand)
  std::string head_endpoint;   // where the replicas connect
  std::string session;         // the head's connector session
  uint64_t shm_threshold_bytes = 65536;
  std::chrono::milliseconds heartbeat_interval{1000};
  // The launcher's CUDA_VISIBLE_DEVICES; the stages' `devices` index into it.
  std::optional<std::string> visible_devices;
  bool retain_inputs = false;  // StageLaunchConfig::retain_inputs
  // The API frontends' control endpoints (StageLaunchConfig::frontend_endpoints); empty for none.
  std::vector<std::string> frontend_endpoints;
};

class ReplicaSet {
 public:
  using Clock = Replica::Clock;

  // num_replicas replicas per stage, all kStarting, none launched; with `only_stage` (the head of
  // a distributed launch) that stage's alone, the other stages' replicas join later. `pipeline`
  // must outlive the set and be valid (validate_pipeline()).
  explicit ReplicaSet(const PipelineSpec& pipeline, std::optional<int> only_stage = std::nullopt);

  // Starts every replica's process with its slice of its stage's devices. Throws omni::Error:
  // kInvalidConfig for a bad device assignment, kUnavailable when a process cannot be started
  // (the replicas started before it keep running; stop_all() ends them).
  void launch(const ReplicaLaunch& launch);

  int num_stages() const { return static_cast<int>(stages_.size()); }
  // A deque: a replica that joins never moves the others.
  std::deque<Replica>& stage(int stage_id) { return stages_.at(stage_id); }
  Replica& at(int stage_id, int index) { return stages_.at(stage_id).at(index); }
  // The replica a control message came from; null (and a warning) for an unknown peer.
  Replica* find(const std::string& identity);
  // The same without the warning (a distributed head answers unknown peers).
  Replica* lookup(const std::string& identity);

  // A headless worker's replica registered as `identity`: it takes the stage's lowest dropped slot
  // or a new one, kRegistered, heard at `now`.
  Replica& join(int stage_id, const std::string& identity, const RegisterMessage& message, bool other_host,
                Clock::time_point now);
  // kError and kDown replicas gone longer than `grace` become kDropped; returns them.
  std::vector<Replica*> drop_gone(Clock::time_point now, std::chrono::milliseconds grace);
  // The number of kReady replicas of each stage.
  std::vector<int> ready_counts() const;
  void set_policy(LbPolicy policy) { policy_ = policy; }

  // A start-up message from `replica` (Register, Ready, InitFailed) moves it along; any message
  // counts as heard at `now`. Other message types change nothing here. A Register of a replica
  // without a process of this set starts watching its pid (an API frontend's replicas); a replica
  // that registers again (its channel was reset) is kRegistered again until its next Ready.
  void on_startup_message(Replica& replica, const StageMessage& message, Clock::time_point now);
  // Any message of a running replica: it is alive at `now`.
  void heard(Replica& replica, Clock::time_point now) { replica.last_heard = now; }
  void on_heartbeat(Replica& replica, const HeartbeatMessage& heartbeat);

  bool all_ready() const;
  // Throws the start-up error of the first replica that cannot become ready: its InitFailed (its
  // code, "stage 1 (replica 0) failed to start: …"), or kUnavailable when its process ended
  // without one, or kTimeout naming --stage-init-timeout once it has been starting longer than
  // `stage_init_timeout`. A replica whose process ended is given `exit_grace` for its InitFailed
  // to arrive, meanwhile `receive` is called again and again: it waits a little and takes in the
  // waiting start-up messages.
  void check_startup(Clock::time_point now, std::chrono::milliseconds stage_init_timeout,
                     std::chrono::milliseconds exit_grace, const std::function<void()>& receive);

  // The ready replica of `stage_id` the policy picks, or -1 when the stage has none. kFewestHeld:
  // the one holding the fewest requests (the lowest index among equals); kRandom: any, uniformly;
  // kRoundRobin: the next after the previous pick; kLeastQueueLength: the smallest queue — the
  // larger of its last heartbeat's running requests and the requests the head has on it (newer
  // than the heartbeat) — ties broken at random.
  int pick(int stage_id);
  void assign(Replica& replica, const std::string& request_id) { replica.requests.insert(request_id); }
  void release(Replica& replica, const std::string& request_id) { replica.requests.erase(request_id); }

  // Marks `replica` failed and hands back the requests it held (it holds none after). Returns the
  // failure's description, "stage 1 (replica 0) failed: <reason>".
  std::string fail(Replica& replica, const std::string& reason, std::set<std::string>& affected);

  // A ready replica that is no longer alive, and why.
  struct Lapse {
    Replica* replica = nullptr;
    std::string reason;   // "its process was killed by signal 9 (SIGKILL)", "it sent no heartbeat for 30s"
    bool exited = false;  // its process ended (else it went silent and has been SIGKILLed)
  };
  // The ready replicas whose process ended, or that were silent longer than `heartbeat_timeout`
  // at `now` (those get SIGKILL now). They stay kReady: failing them is the caller's decision,
  // after it took in what an ended process sent before it ended.
  std::vector<Lapse> lapsed(Clock::time_point now, std::chrono::milliseconds heartbeat_timeout);

  // Waits for every launched replica process to end within `grace` overall, then kills the rest;
  // replicas not failed become kStopped.
  void stop_all(std::chrono::milliseconds grace);

  std::vector<ReplicaInfo> infos() const;

 private:
  const PipelineSpec& pipeline_;
  std::vector<std::deque<Replica>> stages_;  // by stage id, then replica index
  std::map<std::string, std::pair<int, int>> by_identity_;
  LbPolicy policy_ = LbPolicy::kFewestHeld;
  std::map<int, size_t> next_round_robin_;  // by stage
  std::minstd_rand random_{std::random_device{}()};
};

// The stages that list `stage_id` among their input sources, ascending.
std::vector<int> consumers_of(const PipelineSpec& pipeline, int stage_id);

}  // namespace omni::runtime
