#include "runtime/orchestrator.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "runtime/control_channel.h"
#include "runtime/replica_set.h"
#include "runtime/request_plan.h"
#include "runtime/request_router.h"
#include "runtime/shm_connector.h"
#include "runtime/stale_segments.h"

namespace omni::runtime {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kLoopTick{50};
constexpr std::chrono::milliseconds kExitMessageGrace{250};

std::string new_session() {
  std::random_device random;
  return fmt::format("{}x{:06x}", getpid(), random() & 0xffffff);
}

// Local replicas reach a wildcard TCP bind through loopback.
std::string endpoint_for_replicas(std::string endpoint) {
  for (const char* wildcard : {"tcp://0.0.0.0:", "tcp://*:"}) {
    if (endpoint.rfind(wildcard, 0) == 0) endpoint = "tcp://127.0.0.1:" + endpoint.substr(std::strlen(wildcard));
  }
  return endpoint;
}

double seconds(std::chrono::milliseconds d) { return static_cast<double>(d.count()) / 1000.0; }

// From tens of microseconds (an idle local hop) to a second (a stage busy with long steps).
const std::vector<double> kHopBuckets = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                         0.01,    0.025,  0.05,    0.1,    0.25,  0.5,    1.0};

// A sleep or wake-up of some stages, waiting for its replicas' answers.
struct ControlOp {
  bool sleep = true;  // else wake-up
  std::vector<int> stage_ids;
  int level = 0;
  StageControlDone done;
};

}  // namespace

std::string frontend_control_endpoint(const std::string& session, int index) {
  return fmt::format("ipc://@omnistage-{}-frontend{}", session, index);
}

// The orchestrator thread's event loop: takes the API threads' commands (submit, abort) and the
// replicas' control messages and hands each to the unit that owns what it is about — replica
// lifecycle to the ReplicaSet, routing to the RequestRouter.
class Orchestrator::Loop {
 public:
  Loop(PipelineSpec pipeline, OrchestratorOptions options)
      : pipeline_(checked(std::move(pipeline))),
        options_(std::move(options)),
        session_(options_.attach ? options_.attach->session : new_session()),
        replicas_(pipeline_,
                  options_.distributed ? std::optional<int>(options_.distributed->local_stage) : std::nullopt),
        router_(pipeline_, replicas_,
                ConnectorContext{session_, options_.shm_threshold_bytes, options_.distributed.has_value(), false},
                options_.edge_inflight_limit, router_links(), router_metrics()) {
    replicas_.set_policy(options_.lb_policy);
    if (options_.distributed) router_.enable_replay();
    ready_counts_.assign(pipeline_.stages.size(), 0);
    if (options_.metrics && options_.distributed) {
      replica_states_ = &options_.metrics->gauge("omnistage:stage_replicas",
                                                 "Replicas of a stage by state (ready, error, down, starting...).",
                                                 {"stage", "state"});
      queue_lengths_ =
          &options_.metrics->gauge("omnistage:replica_queue_length",
                                   "Running requests of a replica, as of its last heartbeat.", {"stage", "replica"});
      requests_taken_ = &options_.metrics->gauge("omnistage:replica_requests_taken",
                                                 "Requests the head sent to a replica.", {"stage", "replica"});
    }
    if (options_.metrics) {
      step_time_ = &options_.metrics->histogram(
          "omnistage:stage_step_seconds",
          "Time of one engine step of a stage (part \"step\": the whole step) and of its parts (those its runner "
          "times, e.g. a model's forward and a per-step sub-model), and of taking one new request (part "
          "\"add_request\": e.g. "
          "building a prompt; requests queued behind it wait that long), as the stage worker measured it.",
          {"stage", "part"}, kHopBuckets);
    }
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) throw_error(ErrorCode::kInternal, "eventfd: {}", std::strerror(errno));

    std::promise<void> started;
    auto ready = started.get_future();
    thread_ = std::thread([this, started = std::move(started)]() mutable { run(std::move(started)); });
    try {
      ready.get();
    } catch (...) {
      thread_.join();
      close(wake_fd_);
      throw;
    }
  }

  ~Loop() {
    shutdown();
    close(wake_fd_);
  }

  void submit(GenerationRequest request, EventSink sink) {
    RequestPlan plan = plan_request(pipeline_, request);
    std::lock_guard lock(mutex_);
    if (stopping_) throw_error(ErrorCode::kUnavailable, "the server is shutting down");
    if (!failure_.empty()) throw_error(ErrorCode::kUnavailable, "{}", failure_);
    for (int stage_id : plan.stages) {
      if (options_.distributed && ready_counts_[stage_id] == 0) {
        throw_error(ErrorCode::kUnavailable, "stage {} has no healthy replica", stage_id);
      }
      if (sleeping_.count(stage_id)) {
        throw_error(ErrorCode::kUnavailable, "stage {} is asleep (POST /v1/omni/wakeup wakes it)", stage_id);
      }
    }
    if (!live_ids_.insert(request.request_id).second) {
      throw_error(ErrorCode::kInvalidArgument, "request id '{}' is already in use", request.request_id);
    }
    commands_.push_back(Command{std::move(request), std::move(sink), std::move(plan), {}, Clock::now(), {}, -1});
    wake();
  }

  void abort(const std::string& request_id) {
    std::lock_guard lock(mutex_);
    commands_.push_back(Command{{}, {}, {}, request_id, Clock::now(), {}, -1});
    wake();
  }

  bool healthy() const {
    std::lock_guard lock(mutex_);
    return failure_.empty() && !stopping_ && missing_stages().empty();
  }

  std::string unhealthy_reason() const {
    std::lock_guard lock(mutex_);
    if (stopping_) return "the server is shutting down";
    if (!failure_.empty()) return failure_;
    std::vector<int> missing = missing_stages();
    if (missing.empty()) return "healthy";
    std::string stages;
    for (int id : missing) stages += (stages.empty() ? "" : ", ") + std::to_string(id);
    return fmt::format("no healthy replica of stage(s) {} (their headless workers have not registered, or failed)",
                       stages);
  }

  void control(bool sleep, std::vector<int> stage_ids, int level, StageControlDone done) {
    for (int id : stage_ids) {
      if (id < 0 || id >= static_cast<int>(pipeline_.stages.size())) {
        throw_error(ErrorCode::kInvalidArgument, "stage_ids: the pipeline has no stage {} (its stages are 0..{})", id,
                    pipeline_.stages.size() - 1);
      }
    }
    if (sleep && level != 1 && level != 2) {
      throw_error(ErrorCode::kInvalidArgument, "level: must be 1 or 2, not {}", level);
    }
    if (stage_ids.empty()) {
      for (const StageSpec& stage : pipeline_.stages) stage_ids.push_back(stage.stage_id);
    }
    std::sort(stage_ids.begin(), stage_ids.end());
    stage_ids.erase(std::unique(stage_ids.begin(), stage_ids.end()), stage_ids.end());
    std::lock_guard lock(mutex_);
    if (stopping_) throw_error(ErrorCode::kUnavailable, "the server is shutting down");
    Command command;
    command.control = ControlOp{sleep, std::move(stage_ids), level, std::move(done)};
    command.queued = Clock::now();
    commands_.push_back(std::move(command));
    wake();
  }

  std::vector<int> sleeping_stages() const {
    std::lock_guard lock(mutex_);
    return {sleeping_.begin(), sleeping_.end()};
  }

  void reset_frontend(int index) {
    std::lock_guard lock(mutex_);
    Command command;
    command.reset_frontend = index;
    command.queued = Clock::now();
    commands_.push_back(std::move(command));
    wake();
  }

  void shutdown() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      wake();
    }
    std::lock_guard join_lock(join_mutex_);
    if (thread_.joinable()) thread_.join();
  }

  std::vector<ReplicaInfo> replicas() const {
    std::lock_guard lock(mutex_);
    return replica_infos_;
  }
  std::string control_endpoint() const {
    std::lock_guard lock(mutex_);
    return endpoint_;
  }
  const std::string& session() const { return session_; }

 private:
  struct Command {
    GenerationRequest request;
    EventSink sink;
    RequestPlan plan;
    std::string abort_id;  // set for an abort
    Clock::time_point queued;
    std::optional<ControlOp> control;  // set for a sleep or wake-up
    int reset_frontend = -1;           // set for a frontend reset
  };

  static PipelineSpec checked(PipelineSpec pipeline) {
    validate_pipeline(pipeline);
    return pipeline;
  }

  RouterLinks router_links() {
    return {[this](const Replica& replica, const StageMessage& message) {
              return server_->send(replica.identity, message);
            },
            // A send fails only when the replica's connection is gone: it is DOWN.
            [this](Replica& replica, const std::string& reason) { replica_failed(replica, reason, true); },
            [this](const std::string& id) { forget_id(id); }};
  }

  RouterMetrics router_metrics() {
    RouterMetrics metrics;
    if (!options_.metrics) return metrics;
    metrics.dispatch_time =
        &options_.metrics
             ->histogram("omnistage:orchestrator_dispatch_seconds",
                         "Time from a request submitted to the orchestrator to its entry stage.", {}, kHopBuckets)
             .with({});
    auto& hops = options_.metrics->histogram(
        "omnistage:stage_hop_seconds",
        "Head-to-stage round trip of a request outside the stage worker (transport and event-loop waits).", {"stage"},
        kHopBuckets);
    for (const StageSpec& stage : pipeline_.stages) {
      metrics.hop_time.push_back(&hops.with({std::to_string(stage.stage_id)}));
    }
    return metrics;
  }

  void wake() {
    uint64_t one = 1;
    ssize_t written = write(wake_fd_, &one, sizeof one);
    (void)written;
  }

  // Under mutex_.
  std::vector<int> missing_stages() const {
    std::vector<int> missing;
    if (!options_.distributed) return missing;
    for (size_t s = 0; s < ready_counts_.size(); ++s) {
      if (ready_counts_[s] == 0) missing.push_back(static_cast<int>(s));
    }
    return missing;
  }

  // ---- thread body ------------------------------------------------------------------------

  void run(std::promise<void> started) {
    // Termination signals are for the process's owner (serve's main thread), never this thread or
    // the ZeroMQ threads it starts, whose default action would kill the head without cleanup.
    sigset_t termination;
    sigemptyset(&termination);
    sigaddset(&termination, SIGINT);
    sigaddset(&termination, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &termination, nullptr);
    // What a head that died uncleanly (SIGKILL, the OOM killer) left in /dev/shm goes now.
    if (!options_.attach) {
      if (size_t swept = sweep_stale_segments()) {
        spdlog::info("head: removed {} shared-memory segment(s) left by processes that have exited", swept);
      }
    }
    try {
      server_.emplace(options_.attach                     ? frontend_control_endpoint(session_, options_.attach->index)
                      : options_.control_endpoint.empty() ? "ipc://@omnistage-" + session_
                                                          : options_.control_endpoint);
      {
        std::lock_guard lock(mutex_);
        endpoint_ = server_->endpoint();
      }
      start_replicas();
    } catch (...) {
      replicas_.stop_all(std::chrono::milliseconds(0));
      publish_replicas();
      if (!options_.attach) unlink_session_segments(session_);
      server_.reset();
      started.set_exception(std::current_exception());
      return;
    }
    started.set_value();
    serve();
    finish();
  }

  void start_replicas() {
    if (options_.attach) {  // the launcher started them; they register here once ready
      for (int stage_id = 0; stage_id < replicas_.num_stages(); ++stage_id) {
        for (Replica& replica : replicas_.stage(stage_id)) replica.started = Clock::now();
      }
      wait_until_ready();
      return;
    }
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    ReplicaLaunch launch{options_.worker_program,
                         endpoint_for_replicas(server_->endpoint()),
                         session_,
                         options_.shm_threshold_bytes,
                         options_.heartbeat_interval,
                         visible ? std::optional<std::string>(visible) : std::nullopt,
                         options_.distributed.has_value()};
    for (int i = 0; i < options_.api_frontends; ++i) {
      launch.frontend_endpoints.push_back(frontend_control_endpoint(session_, i));
    }
    replicas_.launch(launch);
    publish_replicas();
    wait_until_ready();
  }

  void wait_until_ready() {
    const auto overall_deadline = Clock::now() + options_.init_timeout;
    auto receive = [this] {
      server_->wait(std::chrono::milliseconds(10), -1);
      receive_startup_messages();
    };
    while (true) {
      receive_startup_messages();
      if (replicas_.all_ready()) return;
      replicas_.check_startup(Clock::now(), options_.stage_init_timeout, kExitMessageGrace, receive);
      if (Clock::now() > overall_deadline) {
        throw_error(ErrorCode::kTimeout, "the stages were not all ready within --init-timeout={}s",
                    seconds(options_.init_timeout));
      }
      {
        std::lock_guard lock(mutex_);
        if (stopping_) throw_error(ErrorCode::kUnavailable, "shut down while the stages were starting");
      }
      server_->wait(kLoopTick, wake_fd_);
    }
  }

  void receive_startup_messages() {
    while (auto received = server_->receive()) {
      if (options_.distributed) {  // joins and late messages of joined replicas as when serving
        handle(received->peer, received->message);
      } else if (Replica* replica = replicas_.find(received->peer)) {
        replicas_.on_startup_message(*replica, received->message, Clock::now());
      }
    }
  }

  // ---- distributed launch: joins ------------------------------------------------------------

  // A headless worker's Register (a replica joining its stage's pool), or a message of a replica
  // this head does not know: the head restarted, and asks it to register again.
  void on_unknown_peer(const std::string& peer, const StageMessage& message) {
    const auto now = Clock::now();
    const auto* registered = std::get_if<RegisterMessage>(&message);
    if (!registered || registered->pipeline.is_null()) {
      auto& asked = rejoin_asked_[peer];
      if (now - asked > std::chrono::seconds(1)) {
        spdlog::info("'{}' message from unknown replica '{}': asking it to register", message_type_name(message), peer);
        server_->send(peer, RejoinMessage{});
        asked = now;
      }
      return;
    }
    rejoin_asked_.erase(peer);
    JoinReplyMessage reply;
    const int stages = static_cast<int>(pipeline_.stages.size());
    if (registered->stage_id < 0 || registered->stage_id >= stages) {
      reply.message = fmt::format("--stage-id {}: the pipeline has no such stage (its stages are 0..{})",
                                  registered->stage_id, stages - 1);
    } else if (auto difference = fingerprint_difference(options_.distributed->fingerprint, registered->pipeline)) {
      reply.message = fmt::format("its pipeline or deploy config differs from the head's at {}", *difference);
    }
    if (!reply.message.empty()) {
      spdlog::error("refused the headless worker '{}' of stage {} at {}: {}", peer, registered->stage_id,
                    registered->address, reply.message);
      server_->send(peer, reply);
      return;
    }
    const bool other_host = !is_local_address(registered->address);
    Replica& replica = replicas_.join(registered->stage_id, peer, *registered, other_host, now);
    replicas_.on_startup_message(replica, message, now);
    send_join_reply(replica);
    publish_replicas();
  }

  void send_join_reply(const Replica& replica) {
    server_->send(replica.identity, JoinReplyMessage{true, replica.index, session_, replica.other_host, true, ""});
  }

  void serve() {
    while (true) {
      // The wake-up is taken before the commands: a submit() after the swap then leaves its wake-up
      // for the wait below, instead of having it drained here and waiting out a whole tick.
      uint64_t count;
      ssize_t drained = read(wake_fd_, &count, sizeof count);
      (void)drained;
      std::deque<Command> commands;
      {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
        commands.swap(commands_);
      }
      for (Command& command : commands) {
        if (command.control) {
          controls_.push_back(std::move(*command.control));
        } else if (command.reset_frontend >= 0) {
          send_to_ready(FrontendResetMessage{command.reset_frontend});
        } else if (command.abort_id.empty()) {
          router_.start(std::move(command.request), std::move(command.sink), std::move(command.plan), command.queued);
        } else {
          router_.end_request(command.abort_id, std::nullopt);
        }
      }
      receive_messages();
      check_replicas();
      start_next_control();
      server_->wait(kLoopTick, wake_fd_);
    }
  }

  void send_to_ready(const StageMessage& message) {
    for (int stage_id = 0; stage_id < replicas_.num_stages(); ++stage_id) {
      for (const Replica& replica : replicas_.stage(stage_id)) {
        if (replica.phase == ReplicaPhase::kReady) server_->send(replica.identity, message);
      }
    }
  }

  // ---- sleep mode ---------------------------------------------------------------------------

  // Starts the oldest queued sleep or wake-up once the one before it has been answered.
  void start_next_control() {
    while (!active_control_ && !controls_.empty()) {
      ControlOp op = std::move(controls_.front());
      controls_.pop_front();
      StageControlResult result;
      std::vector<int> stages;
      {
        std::lock_guard lock(mutex_);
        for (int id : op.stage_ids) {
          if (op.sleep || sleeping_.count(id)) stages.push_back(id);
        }
        if (op.sleep) sleeping_.insert(stages.begin(), stages.end());  // new requests for them are refused now
      }
      if (stages.empty()) {  // a wake-up with no stage asleep
        result.status = "SKIPPED";
        op.done(std::move(result));
        continue;
      }
      for (int id : stages) {
        for (const Replica& replica : replicas_.stage(id)) {
          if (replica.phase != ReplicaPhase::kReady) continue;
          bool sent = op.sleep ? server_->send(replica.identity, SleepMessage{op.level})
                               : server_->send(replica.identity, WakeUpMessage{});
          if (sent) awaiting_.insert({replica.stage_id, replica.index});
        }
      }
      op.stage_ids = stages;
      active_control_ = std::move(op);
      control_result_ = StageControlResult{};
      asleep_after_.clear();
      if (awaiting_.empty()) {
        control_result_.error = Error(ErrorCode::kUnavailable,
                                      fmt::format("stage {} has no live replica", active_control_->stage_ids.front()));
        finish_control();
      }
    }
  }

  void on_control_ack(const Replica& replica, const StageControlAck& ack) {
    if (!active_control_ || !awaiting_.erase({replica.stage_id, replica.index})) {
      spdlog::warn("stage {} replica {}: unexpected {} answer ignored", replica.stage_id, replica.index, ack.operation);
      return;
    }
    control_result_.acks.push_back({{"stage_id", ack.stage_id},
                                    {"replica", ack.replica},
                                    {"level", ack.level},
                                    {"rss_before_bytes", ack.rss_before_bytes},
                                    {"rss_after_bytes", ack.rss_after_bytes},
                                    {"seconds", ack.seconds}});
    if (ack.error && !control_result_.error) control_result_.error = Error(*ack.error, ack.message);
    if (ack.level > 0) asleep_after_.insert(replica.stage_id);
    if (awaiting_.empty()) finish_control();
  }

  // Every replica answered (or failed): a stage sleeps when one of its replicas does.
  void finish_control() {
    {
      std::lock_guard lock(mutex_);
      for (int id : active_control_->stage_ids) {
        if (asleep_after_.count(id)) {
          sleeping_.insert(id);
        } else {
          sleeping_.erase(id);
        }
      }
    }
    ControlOp op = std::move(*active_control_);
    active_control_.reset();
    op.done(std::move(control_result_));
  }

  void fail_controls(const Error& error) {
    if (active_control_) {
      awaiting_.clear();
      if (!control_result_.error) control_result_.error = error;
      finish_control();
    }
    for (ControlOp& op : controls_) {
      StageControlResult result;
      result.error = error;
      op.done(std::move(result));
    }
    controls_.clear();
  }

  void finish() {
    std::deque<Command> pending;
    {
      std::lock_guard lock(mutex_);
      pending.swap(commands_);
    }
    Error stopping(ErrorCode::kUnavailable, "the server is shutting down");
    for (Command& command : pending) {
      if (command.control) {
        controls_.push_back(std::move(*command.control));
      } else if (command.reset_frontend < 0 && command.abort_id.empty()) {
        RequestRouter::deliver(command.sink, RequestRouter::error_event(stopping));
        forget_id(command.request.request_id);
      }
    }
    fail_controls(stopping);
    router_.end_all(stopping);
    if (options_.attach) {  // the replicas and the session's segments are the launcher's
      server_.reset();
      return;
    }
    for (int stage_id = 0; stage_id < replicas_.num_stages(); ++stage_id) {
      for (const Replica& replica : replicas_.stage(stage_id)) {
        // A headless worker's replica stays up and registers with the next head on this address.
        if (replica.phase == ReplicaPhase::kReady && !replica.joined)
          server_->send(replica.identity, ShutdownMessage{});
      }
    }
    replicas_.stop_all(options_.shutdown_grace);
    publish_replicas();
    size_t removed = unlink_session_segments(session_);
    if (removed > 0) spdlog::info("removed {} unconsumed shared-memory segments", removed);
    server_.reset();
  }

  // ---- events -----------------------------------------------------------------------------

  void receive_messages() {
    while (auto received = server_->receive()) handle(received->peer, received->message);
  }

  void handle(const std::string& peer, StageMessage& message) {
    Replica* replica = options_.distributed ? replicas_.lookup(peer) : replicas_.find(peer);
    if (!replica && options_.distributed) {
      on_unknown_peer(peer, message);
      return;
    }
    if (!replica) return;
    replicas_.heard(*replica, Clock::now());
    if (options_.distributed && handle_pool_message(*replica, message)) return;
    if (auto* output = std::get_if<OutputMessage>(&message)) {
      router_.on_output(*replica, *output);
    } else if (auto* error = std::get_if<ErrorMessage>(&message)) {
      if (error->fatal || error->request_id.empty()) {
        replica_failed(*replica, error->message);
      } else {
        router_.on_error(*replica, *error);
      }
    } else if (auto* ack = std::get_if<StageControlAck>(&message)) {
      on_control_ack(*replica, *ack);
    } else if (auto* heartbeat = std::get_if<HeartbeatMessage>(&message)) {
      replicas_.on_heartbeat(*replica, *heartbeat);
      if (step_time_) {
        for (const StepTiming& t : heartbeat->step_timings) {
          step_time_->with({std::to_string(replica->stage_id), t.part}).observe(t.seconds);
        }
      }
      publish_replicas();
    } else {
      spdlog::warn("stage {} replica {}: unexpected '{}' message ignored", replica->stage_id, replica->index,
                   message_type_name(message));
    }
  }

  // The start-up and membership messages of a pool's replica, at any time. Returns false for the
  // others (the request conversation, heartbeats, acks).
  bool handle_pool_message(Replica& replica, const StageMessage& message) {
    if (std::holds_alternative<RegisterMessage>(message) && replica.joined) {
      send_join_reply(replica);  // the worker sent its Register again before our answer reached it
      return true;
    }
    if (std::holds_alternative<RegisterMessage>(message) || std::holds_alternative<ReadyMessage>(message)) {
      if (replica.phase == ReplicaPhase::kDown || replica.phase == ReplicaPhase::kDropped) return true;
      replicas_.on_startup_message(replica, message, Clock::now());
      publish_replicas();
      return true;
    }
    if (const auto* failed = std::get_if<InitFailedMessage>(&message)) {
      replicas_.on_startup_message(replica, message, Clock::now());
      if (replica.joined) {
        spdlog::error("stage {} replica {} (joined from {}) failed to start: {}", replica.stage_id, replica.index,
                      replica.address, failed->message);
        replica.phase = ReplicaPhase::kDown;
        replica.gone_since = Clock::now();
        publish_replicas();
      }
      return true;
    }
    if (std::holds_alternative<LeaveMessage>(message)) {
      if (replica.phase == ReplicaPhase::kReady) {
        replica_failed(replica, "it left the pool (its worker stopped)", true);
      } else if (replica.phase != ReplicaPhase::kDropped) {
        replica.phase = ReplicaPhase::kDown;
        replica.gone_since = Clock::now();
        publish_replicas();
      }
      return true;
    }
    if (std::holds_alternative<HeartbeatMessage>(message) && replica.phase == ReplicaPhase::kError) {
      spdlog::warn("stage {} replica {}: heard again, back in the pool", replica.stage_id, replica.index);
      replica.phase = ReplicaPhase::kReady;
    }
    return false;
  }

  void check_replicas() {
    std::vector<ReplicaSet::Lapse> lapses = replicas_.lapsed(Clock::now(), options_.heartbeat_timeout);
    // What an ended process sent before it ended is still delivered, ahead of the failure.
    if (std::any_of(lapses.begin(), lapses.end(), [](const ReplicaSet::Lapse& l) { return l.exited; })) {
      receive_messages();
    }
    for (const ReplicaSet::Lapse& lapse : lapses) {
      if (lapse.replica->phase == ReplicaPhase::kReady) replica_failed(*lapse.replica, lapse.reason, lapse.exited);
    }
    if (!options_.distributed) return;
    for (Replica* dropped : replicas_.drop_gone(Clock::now(), options_.distributed->replica_grace)) {
      spdlog::info("stage {} replica {}: dropped from the pool (gone longer than {}s)", dropped->stage_id,
                   dropped->index, seconds(options_.distributed->replica_grace));
      publish_replicas();
    }
    if (!init_wait_reported_ && Clock::now() - started_ > options_.stage_init_timeout) {
      init_wait_reported_ = true;
      std::vector<int> missing;
      {
        std::lock_guard lock(mutex_);
        missing = missing_stages();
      }
      for (int id : missing) {
        spdlog::warn(
            "stage {}: no replica ready within --stage-init-timeout={}s; its requests get 503 until a "
            "headless worker of it registers",
            id, seconds(options_.stage_init_timeout));
      }
    }
  }

  // In a pool (distributed launch) the replica leaves it, DOWN when its process ended or it left,
  // else ERROR; its requests are replayed where they can be. Otherwise the server has failed.
  void replica_failed(Replica& replica, const std::string& reason, bool down = false) {
    std::set<std::string> affected;
    if (options_.distributed) {
      replica.phase = down ? ReplicaPhase::kDown : ReplicaPhase::kError;
      replica.gone_since = Clock::now();
    }
    std::string message = replicas_.fail(replica, reason, affected);
    spdlog::error("{}", message);
    if (!options_.distributed) {
      std::lock_guard lock(mutex_);
      if (failure_.empty()) failure_ = message;
    }
    publish_replicas();
    if (options_.distributed) {
      // A silent replica may come back: it must not go on with what is replayed elsewhere.
      if (!down) {
        for (const std::string& id : affected) server_->send(replica.identity, AbortMessage{id});
      }
      router_.replica_lost(replica, affected, message);
    } else {
      for (const std::string& id : affected) router_.end_request(id, Error(ErrorCode::kUnavailable, message));
    }
    if (active_control_ && awaiting_.erase({replica.stage_id, replica.index})) {
      if (!control_result_.error) control_result_.error = Error(ErrorCode::kUnavailable, message);
      if (awaiting_.empty()) finish_control();
    }
  }

  void publish_replicas() {
    std::vector<ReplicaInfo> infos = replicas_.infos();
    std::vector<int> ready = replicas_.ready_counts();
    if (replica_states_) {
      for (int stage = 0; stage < replicas_.num_stages(); ++stage) {
        std::map<std::string_view, int> by_state;
        for (ReplicaPhase phase : {ReplicaPhase::kStarting, ReplicaPhase::kRegistered, ReplicaPhase::kReady,
                                   ReplicaPhase::kError, ReplicaPhase::kDown}) {
          by_state[replica_phase_name(phase)] = 0;
        }
        for (const Replica& r : replicas_.stage(stage)) {
          if (r.phase == ReplicaPhase::kDropped) continue;
          by_state[replica_phase_name(r.phase)]++;
          queue_lengths_->with({std::to_string(stage), std::to_string(r.index)}).set(r.running_requests);
          requests_taken_->with({std::to_string(stage), std::to_string(r.index)}).set(r.requests_taken);
        }
        for (const auto& [state, count] : by_state) {
          replica_states_->with({std::to_string(stage), std::string(state)}).set(count);
        }
      }
    }
    std::lock_guard lock(mutex_);
    replica_infos_ = std::move(infos);
    ready_counts_ = std::move(ready);
  }

  void forget_id(const std::string& id) {
    std::lock_guard lock(mutex_);
    live_ids_.erase(id);
  }

  // Immutable after construction.
  const PipelineSpec pipeline_;
  const OrchestratorOptions options_;
  const std::string session_;
  int wake_fd_ = -1;
  MetricFamily<Histogram>* step_time_ = nullptr;  // by stage and part; null without a metrics registry
  // A distributed head's pool series (OrchestratorOptions::distributed); null otherwise.
  MetricFamily<Gauge>* replica_states_ = nullptr;
  MetricFamily<Gauge>* queue_lengths_ = nullptr;
  MetricFamily<Gauge>* requests_taken_ = nullptr;
  const Clock::time_point started_ = Clock::now();
  bool init_wait_reported_ = false;
  std::map<std::string, Clock::time_point> rejoin_asked_;  // unknown peers told to register, and when

  // Shared with API threads, under mutex_.
  mutable std::mutex mutex_;
  std::deque<Command> commands_;
  std::set<std::string> live_ids_;
  bool stopping_ = false;
  std::string failure_;
  std::vector<ReplicaInfo> replica_infos_;
  std::vector<int> ready_counts_;  // ready replicas by stage
  std::string endpoint_;
  std::set<int> sleeping_;  // stages asleep, or being put to sleep

  // Sleep mode, the orchestrator thread's own: queued operations, the one waiting for answers.
  std::deque<ControlOp> controls_;
  std::optional<ControlOp> active_control_;
  std::set<std::pair<int, int>> awaiting_;  // (stage, replica) whose answer is due
  std::set<int> asleep_after_;              // stages a replica of which answered asleep
  StageControlResult control_result_;

  // The orchestrator thread's own.
  std::optional<ControlServer> server_;
  ReplicaSet replicas_;
  RequestRouter router_;

  std::mutex join_mutex_;
  std::thread thread_;
};

Orchestrator::Orchestrator(PipelineSpec pipeline, OrchestratorOptions options)
    : loop_(std::make_unique<Loop>(std::move(pipeline), std::move(options))) {}

Orchestrator::~Orchestrator() = default;

void Orchestrator::submit(GenerationRequest request, EventSink sink) {
  loop_->submit(std::move(request), std::move(sink));
}
void Orchestrator::abort(const std::string& request_id) { loop_->abort(request_id); }
bool Orchestrator::healthy() const { return loop_->healthy(); }
std::string Orchestrator::unhealthy_reason() const { return loop_->unhealthy_reason(); }
void Orchestrator::sleep(std::vector<int> stage_ids, int level, StageControlDone done) {
  loop_->control(true, std::move(stage_ids), level, std::move(done));
}
void Orchestrator::wake_up(std::vector<int> stage_ids, StageControlDone done) {
  loop_->control(false, std::move(stage_ids), 0, std::move(done));
}
std::vector<int> Orchestrator::sleeping_stages() const { return loop_->sleeping_stages(); }
void Orchestrator::reset_frontend(int index) { loop_->reset_frontend(index); }
void Orchestrator::shutdown() { loop_->shutdown(); }
std::vector<Orchestrator::ReplicaInfo> Orchestrator::replicas() const { return loop_->replicas(); }
std::string Orchestrator::control_endpoint() const { return loop_->control_endpoint(); }
std::string Orchestrator::session() const { return loop_->session(); }

}  // namespace omni::runtime
