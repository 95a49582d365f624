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
        replicas_(pipeline_),
        router_(pipeline_, replicas_, ConnectorContext{session_, options_.shm_threshold_bytes},
                options_.edge_inflight_limit, router_links(), router_metrics()) {
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
    return failure_.empty() && !stopping_;
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
            [this](Replica& replica, const std::string& reason) { replica_failed(replica, reason); },
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

  // ---- thread body ------------------------------------------------------------------------

  void run(std::promise<void> started) {
    // Termination signals are for the process's owner (serve's main thread), never this thread or
    // the ZeroMQ threads it starts, whose default action would kill the head without cleanup.
    sigset_t termination;
    sigemptyset(&termination);
    sigaddset(&termination, SIGINT);
    sigaddset(&termination, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &termination, nullptr);
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
                         {}};
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
      if (Replica* replica = replicas_.find(received->peer)) {
        replicas_.on_startup_message(*replica, received->message, Clock::now());
      }
    }
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
        if (replica.phase == ReplicaPhase::kReady) server_->send(replica.identity, ShutdownMessage{});
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
    Replica* replica = replicas_.find(peer);
    if (!replica) return;
    replicas_.heard(*replica, Clock::now());
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

  void check_replicas() {
    std::vector<ReplicaSet::Lapse> lapses = replicas_.lapsed(Clock::now(), options_.heartbeat_timeout);
    // What an ended process sent before it ended is still delivered, ahead of the failure.
    if (std::any_of(lapses.begin(), lapses.end(), [](const ReplicaSet::Lapse& l) { return l.exited; })) {
      receive_messages();
    }
    for (const ReplicaSet::Lapse& lapse : lapses) {
      if (lapse.replica->phase == ReplicaPhase::kReady) replica_failed(*lapse.replica, lapse.reason);
    }
  }

  void replica_failed(Replica& replica, const std::string& reason) {
    std::set<std::string> affected;
    std::string message = replicas_.fail(replica, reason, affected);
    spdlog::error("{}", message);
    {
      std::lock_guard lock(mutex_);
      if (failure_.empty()) failure_ = message;
    }
    publish_replicas();
    for (const std::string& id : affected) router_.end_request(id, Error(ErrorCode::kUnavailable, message));
    if (active_control_ && awaiting_.erase({replica.stage_id, replica.index})) {
      if (!control_result_.error) control_result_.error = Error(ErrorCode::kUnavailable, message);
      if (awaiting_.empty()) finish_control();
    }
  }

  void publish_replicas() {
    std::vector<ReplicaInfo> infos = replicas_.infos();
    std::lock_guard lock(mutex_);
    replica_infos_ = std::move(infos);
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

  // Shared with API threads, under mutex_.
  mutable std::mutex mutex_;
  std::deque<Command> commands_;
  std::set<std::string> live_ids_;
  bool stopping_ = false;
  std::string failure_;
  std::vector<ReplicaInfo> replica_infos_;
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
