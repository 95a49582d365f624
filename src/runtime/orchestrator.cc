#include "runtime/orchestrator.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "runtime/child_process.h"
#include "runtime/connector.h"
#include "runtime/control_channel.h"
#include "runtime/device_assignment.h"
#include "runtime/request_plan.h"
#include "runtime/shm_connector.h"
#include "runtime/stage_worker.h"

namespace omni::runtime {

namespace {

using Clock = std::chrono::steady_clock;
using Edge = std::pair<int, int>;  // (from stage, to stage)

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

}  // namespace

class Orchestrator::Loop {
 public:
  Loop(PipelineSpec pipeline, OrchestratorOptions options)
      : pipeline_(std::move(pipeline)), options_(std::move(options)), session_(new_session()) {
    validate_pipeline(pipeline_);
    if (options_.edge_inflight_limit < 1) {
      throw_error(ErrorCode::kInvalidConfig, "edge in-flight limit must be at least 1, not {}",
                  options_.edge_inflight_limit);
    }
    ConnectorContext context{session_, options_.shm_threshold_bytes};
    for (const StageSpec& stage : pipeline_.stages) {
      for (int from : stage.input_sources) {
        edge_connectors_[{from, stage.stage_id}] = make_connector(edge_connector(stage, from), context);
        edges_[{from, stage.stage_id}];
      }
    }
    if (options_.metrics) {
      dispatch_time_ =
          &options_.metrics
               ->histogram("omnistage:orchestrator_dispatch_seconds",
                           "Time from a request submitted to the orchestrator to its entry stage.", {}, kHopBuckets)
               .with({});
      auto& hops = options_.metrics->histogram(
          "omnistage:stage_hop_seconds",
          "Head-to-stage round trip of a request outside the stage worker (transport and event-loop waits).", {"stage"},
          kHopBuckets);
      for (const StageSpec& stage : pipeline_.stages) hop_time_.push_back(&hops.with({std::to_string(stage.stage_id)}));
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
    if (!live_ids_.insert(request.request_id).second) {
      throw_error(ErrorCode::kInvalidArgument, "request id '{}' is already in use", request.request_id);
    }
    commands_.push_back(Command{std::move(request), std::move(sink), std::move(plan), {}, Clock::now()});
    wake();
  }

  void abort(const std::string& request_id) {
    std::lock_guard lock(mutex_);
    commands_.push_back(Command{{}, {}, {}, request_id, Clock::now()});
    wake();
  }

  bool healthy() const {
    std::lock_guard lock(mutex_);
    return failure_.empty() && !stopping_;
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
  enum class Phase { kStarting, kRegistered, kReady, kFailed, kStopped };

  struct Replica {
    int stage_id = 0;
    int index = 0;
    std::string identity;
    std::optional<ChildProcess> process;
    Phase phase = Phase::kStarting;
    Clock::time_point started;
    Clock::time_point last_heard;
    std::set<std::string> requests;
    std::optional<InitFailedMessage> init_failure;
    int64_t running_requests = 0;
  };

  struct StageProgress {
    int replica = -1;
    bool finished = false;
    Clock::time_point submitted;
    std::vector<int32_t> tokens;
    std::vector<PayloadRef> payloads;  // produced here for consumers on the route
  };

  struct Request {
    std::string id;
    EventSink sink;
    RequestPlan plan;
    int prompt_tokens = 0;
    std::vector<int32_t> prompt;
    Json additional_information;
    std::map<int, StageProgress> stages;  // stages submitted to so far
    std::vector<Edge> held_edges;         // edges whose in-flight count includes this request
    // async_chunk outputs for a consumer that has not started yet (its edge is full).
    std::map<int, std::deque<InputChunkMessage>> buffered_chunks;
    int completion_tokens = 0;
  };

  struct EdgeState {
    int in_flight = 0;
  };

  struct Command {
    GenerationRequest request;
    EventSink sink;
    RequestPlan plan;
    std::string abort_id;  // set for an abort
    Clock::time_point queued;
  };

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
      server_.emplace(options_.control_endpoint.empty() ? "ipc://@omnistage-" + session_ : options_.control_endpoint);
      {
        std::lock_guard lock(mutex_);
        endpoint_ = server_->endpoint();
      }
      start_replicas();
    } catch (...) {
      stop_all_replicas(std::chrono::milliseconds(0));
      unlink_session_segments(session_);
      server_.reset();
      started.set_exception(std::current_exception());
      return;
    }
    started.set_value();
    serve();
    finish();
  }

  void start_replicas() {
    const char* visible_env = std::getenv("CUDA_VISIBLE_DEVICES");
    std::optional<std::string> visible = visible_env ? std::optional<std::string>(visible_env) : std::nullopt;
    std::string endpoint = endpoint_for_replicas(server_->endpoint());
    replicas_.resize(pipeline_.stages.size());
    for (const StageSpec& stage : pipeline_.stages) {
      int per_replica = stage.engine_args.value("tensor_parallel_size", 1);
      auto devices = replica_visible_devices(stage.stage_id, stage.devices, stage.num_replicas, per_replica, visible);
      StageLaunchConfig config{
          stage, 0, session_, options_.shm_threshold_bytes, {}, static_cast<int>(options_.heartbeat_interval.count())};
      for (int to : consumers_of(stage.stage_id)) {
        config.output_connectors[to] = edge_connector(pipeline_.stages[to], stage.stage_id);
      }
      for (int r = 0; r < stage.num_replicas; ++r) {
        config.replica = r;
        Replica& replica = replicas_[stage.stage_id].emplace_back();
        replica.stage_id = stage.stage_id;
        replica.index = r;
        replica.identity = replica_identity(stage.stage_id, r);
        by_identity_[replica.identity] = {stage.stage_id, r};
        std::vector<std::string> env;
        if (devices[r]) env.push_back("CUDA_VISIBLE_DEVICES=" + *devices[r]);
        replica.started = Clock::now();
        replica.process = ChildProcess::spawn(
            {options_.worker_program, "stage-worker", "--head", endpoint, "--launch-config", to_json(config).dump()},
            env);
        spdlog::info("stage {} replica {}: started pid {}{}", stage.stage_id, r, replica.process->pid(),
                     devices[r] ? " with CUDA_VISIBLE_DEVICES=" + *devices[r] : "");
      }
    }
    publish_replicas();
    wait_until_ready();
  }

  void wait_until_ready() {
    const auto overall_deadline = Clock::now() + options_.init_timeout;
    while (true) {
      receive_startup_messages();
      bool all_ready = true;
      for (auto& stage : replicas_) {
        for (Replica& replica : stage) {
          if (replica.phase == Phase::kReady) continue;
          all_ready = false;
          if (replica.init_failure) startup_failure(replica, replica.process->wait_or_kill(std::chrono::seconds(5)));
          if (auto status = replica.process->poll()) {
            // An InitFailed sent just before the exit may still be on its way through the socket.
            auto deadline = Clock::now() + kExitMessageGrace;
            while (!replica.init_failure && Clock::now() < deadline) {
              server_->wait(std::chrono::milliseconds(10), -1);
              receive_startup_messages();
            }
            startup_failure(replica, *status);
          }
          if (Clock::now() - replica.started > options_.stage_init_timeout) {
            throw_error(ErrorCode::kTimeout, "stage {} (replica {}) was not ready within --stage-init-timeout={}s",
                        replica.stage_id, replica.index, seconds(options_.stage_init_timeout));
          }
        }
      }
      if (all_ready) return;
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
      Replica* replica = find_replica(received->peer);
      if (!replica) continue;
      replica->last_heard = Clock::now();
      if (auto* failed = std::get_if<InitFailedMessage>(&received->message)) {
        replica->init_failure = *failed;
      } else if (std::holds_alternative<RegisterMessage>(received->message)) {
        replica->phase = Phase::kRegistered;
      } else if (std::holds_alternative<ReadyMessage>(received->message)) {
        replica->phase = Phase::kReady;
        spdlog::info("stage {} replica {}: ready", replica->stage_id, replica->index);
      }
    }
  }

  [[noreturn]] void startup_failure(const Replica& replica, const ExitStatus& status) {
    if (replica.init_failure) {
      throw Error(replica.init_failure->code,
                  fmt::format("stage {} (replica {}) failed to start: {} (the stage process {})", replica.stage_id,
                              replica.index, replica.init_failure->message, status.describe()));
    }
    throw_error(ErrorCode::kUnavailable, "stage {} (replica {}) ended before it was ready: the stage process {}",
                replica.stage_id, replica.index, status.describe());
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
        if (command.abort_id.empty()) {
          start_request(std::move(command));
        } else {
          end_request(command.abort_id, std::nullopt);
        }
      }
      while (auto received = server_->receive()) handle(received->peer, received->message);
      check_replicas();
      server_->wait(kLoopTick, wake_fd_);
    }
  }

  void finish() {
    std::deque<Command> pending;
    {
      std::lock_guard lock(mutex_);
      pending.swap(commands_);
    }
    Error stopping(ErrorCode::kUnavailable, "the server is shutting down");
    for (Command& command : pending) {
      if (command.abort_id.empty()) {
        deliver(command.sink, error_event(stopping));
        forget_id(command.request.request_id);
      }
    }
    std::vector<std::string> live;
    for (const auto& [id, request] : requests_) live.push_back(id);
    for (const std::string& id : live) end_request(id, stopping);
    for (auto& stage : replicas_) {
      for (Replica& replica : stage) {
        if (replica.phase == Phase::kReady) server_->send(replica.identity, ShutdownMessage{});
      }
    }
    stop_all_replicas(options_.shutdown_grace);
    size_t removed = unlink_session_segments(session_);
    if (removed > 0) spdlog::info("removed {} unconsumed shared-memory segments", removed);
    server_.reset();
  }

  void stop_all_replicas(std::chrono::milliseconds grace) {
    auto deadline = Clock::now() + grace;
    for (auto& stage : replicas_) {
      for (Replica& replica : stage) {
        if (!replica.process) continue;
        auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                             std::chrono::milliseconds(0));
        ExitStatus status = replica.process->wait_or_kill(left);
        if (replica.phase != Phase::kFailed) replica.phase = Phase::kStopped;
        spdlog::debug("stage {} replica {}: {}", replica.stage_id, replica.index, status.describe());
      }
    }
    publish_replicas();
  }

  // ---- replicas ---------------------------------------------------------------------------

  Replica* find_replica(const std::string& identity) {
    auto it = by_identity_.find(identity);
    if (it == by_identity_.end()) {
      spdlog::warn("control message from unknown peer '{}' ignored", identity);
      return nullptr;
    }
    return &replicas_[it->second.first][it->second.second];
  }

  std::vector<int> consumers_of(int stage_id) const {
    std::vector<int> consumers;
    for (const StageSpec& stage : pipeline_.stages) {
      for (int from : stage.input_sources) {
        if (from == stage_id) consumers.push_back(stage.stage_id);
      }
    }
    return consumers;
  }

  void publish_replicas() {
    std::vector<ReplicaInfo> infos;
    for (const auto& stage : replicas_) {
      for (const Replica& r : stage) {
        infos.push_back(
            {r.stage_id, r.index, r.process ? r.process->pid() : -1, r.phase == Phase::kFailed, r.running_requests});
      }
    }
    std::lock_guard lock(mutex_);
    replica_infos_ = std::move(infos);
  }

  void check_replicas() {
    auto now = Clock::now();
    for (auto& stage : replicas_) {
      for (Replica& replica : stage) {
        if (replica.phase != Phase::kReady) continue;
        if (auto status = replica.process->poll()) {
          // What the process sent before it ended is still delivered, ahead of the failure.
          while (auto received = server_->receive()) handle(received->peer, received->message);
          if (replica.phase == Phase::kReady) replica_failed(replica, "its process " + status->describe());
        } else if (now - replica.last_heard > options_.heartbeat_timeout) {
          replica.process->signal_group(SIGKILL);
          replica_failed(replica, fmt::format("it sent no heartbeat for {}s", seconds(options_.heartbeat_timeout)));
        }
      }
    }
  }

  void replica_failed(Replica& replica, const std::string& reason) {
    replica.phase = Phase::kFailed;
    std::string message = fmt::format("stage {} (replica {}) failed: {}", replica.stage_id, replica.index, reason);
    spdlog::error("{}", message);
    {
      std::lock_guard lock(mutex_);
      if (failure_.empty()) failure_ = message;
    }
    publish_replicas();
    std::set<std::string> affected = std::move(replica.requests);
    replica.requests.clear();
    for (const std::string& id : affected) end_request(id, Error(ErrorCode::kUnavailable, message));
  }

  int pick_replica(int stage_id) {
    int best = -1;
    for (const Replica& replica : replicas_[stage_id]) {
      if (replica.phase != Phase::kReady) continue;
      if (best < 0 || replica.requests.size() < replicas_[stage_id][best].requests.size()) best = replica.index;
    }
    return best;
  }

  // ---- requests ---------------------------------------------------------------------------

  void start_request(Command command) {
    Request request;
    request.id = command.request.request_id;
    request.sink = std::move(command.sink);
    request.plan = std::move(command.plan);
    request.prompt = std::move(command.request.prompt_token_ids);
    request.additional_information = std::move(command.request.additional_information);
    request.prompt_tokens = static_cast<int>(request.prompt.size());
    std::string id = request.id;
    int entry = request.plan.stages.front();
    requests_.emplace(id, std::move(request));
    Request& stored = requests_.at(id);
    submit_to_stage(stored, entry, stored.prompt, {});
    if (dispatch_time_) dispatch_time_->observe(std::chrono::duration<double>(Clock::now() - command.queued).count());
  }

  // Sends the request to a replica of `stage_id`; on failure the request ends with the error.
  void submit_to_stage(Request& request, int stage_id, std::vector<int32_t> prompt, std::vector<PayloadRef> inputs,
                       bool input_open = false) {
    int index = pick_replica(stage_id);
    if (index < 0) {
      end_request(request.id, Error(ErrorCode::kUnavailable, fmt::format("stage {} has no live replica", stage_id)));
      return;
    }
    Replica& replica = replicas_[stage_id][index];
    StageProgress& progress = request.stages[stage_id];
    progress.replica = index;
    progress.submitted = Clock::now();
    replica.requests.insert(request.id);
    SubmitMessage message{request.id,
                          std::move(prompt),
                          request.plan.sampling_params.at(stage_id),
                          std::move(inputs),
                          request.plan.consumers.at(stage_id),
                          input_open,
                          request.additional_information};
    if (!server_->send(replica.identity, message)) {
      replica_failed(replica, "its control connection is gone");
    }
  }

  void handle(const std::string& peer, StageMessage& message) {
    Replica* replica = find_replica(peer);
    if (!replica) return;
    replica->last_heard = Clock::now();
    if (auto* output = std::get_if<OutputMessage>(&message)) {
      on_output(*replica, *output);
    } else if (auto* error = std::get_if<ErrorMessage>(&message)) {
      on_error(*replica, *error);
    } else if (auto* heartbeat = std::get_if<HeartbeatMessage>(&message)) {
      replica->running_requests = heartbeat->running_requests;
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

  void discard(const PayloadRef& ref) {
    auto it = edge_connectors_.find({ref.address.from_stage, ref.address.to_stage});
    if (it != edge_connectors_.end()) it->second->discard(ref);
  }

  void on_output(Replica& replica, OutputMessage& output) {
    auto it = requests_.find(output.request_id);
    StageProgress* progress = nullptr;
    if (it != requests_.end()) {
      auto stage = it->second.stages.find(replica.stage_id);
      if (stage != it->second.stages.end() && stage->second.replica == replica.index && !stage->second.finished) {
        progress = &stage->second;
      }
    }
    if (!progress) {  // the request ended (aborted, failed) while this output was on its way
      for (const PayloadRef& ref : output.payloads) discard(ref);
      return;
    }
    if (output.stage_seconds && !hop_time_.empty()) {
      double head_seconds = std::chrono::duration<double>(Clock::now() - progress->submitted).count();
      hop_time_[replica.stage_id]->observe(std::max(0.0, head_seconds - *output.stage_seconds));
    }
    Request& request = it->second;
    const std::string id = request.id;
    const std::vector<int> consumers = request.plan.consumers.at(replica.stage_id);
    std::map<int, std::vector<PayloadRef>> chunk_payloads;  // for async_chunk consumers
    for (PayloadRef& ref : output.payloads) {
      if (std::find(consumers.begin(), consumers.end(), ref.address.to_stage) != consumers.end()) {
        if (pipeline_.stages[ref.address.to_stage].async_chunk) chunk_payloads[ref.address.to_stage].push_back(ref);
        progress->payloads.push_back(std::move(ref));
      } else {
        discard(ref);
      }
    }
    progress->tokens.insert(progress->tokens.end(), output.token_ids.begin(), output.token_ids.end());
    bool finished = output.finish_reason.has_value() && !output.more_choices;
    std::vector<int32_t> chunk_tokens = output.token_ids;
    if (replica.stage_id == request.plan.final_stage) {
      request.completion_tokens += static_cast<int>(output.token_ids.size());
      ResponseEvent event;
      event.index = output.index;
      event.token_ids = std::move(output.token_ids);
      event.text = std::move(output.text);
      event.logprobs = std::move(output.logprobs);
      event.audio = std::move(output.audio);
      event.audio_sample_rate = output.audio_sample_rate;
      event.finish_reason = output.finish_reason;
      event.finished = finished;
      event.prompt_tokens = request.prompt_tokens;
      event.completion_tokens = request.completion_tokens;
      deliver(request.sink, std::move(event));
    }
    if (finished) {
      progress->finished = true;
      replica.requests.erase(id);
      release_edges_into(request, replica.stage_id);
      if (replica.stage_id == request.plan.final_stage) {
        close_request(id);
        return;
      }
    }
    // Forwarding can end the request (no live replica), so it is looked up again each time.
    for (int consumer : consumers) {
      auto live = requests_.find(id);
      if (live == requests_.end()) return;
      if (pipeline_.stages[consumer].async_chunk) {
        stream_chunk(id, consumer, InputChunkMessage{id, chunk_tokens, chunk_payloads[consumer], finished});
      } else if (finished && sources_finished(live->second, consumer)) {
        forward(id, consumer);
      }
    }
  }

  // async_chunk: hands one output of the consumer's source to it, starting it on the first one.
  void stream_chunk(const std::string& id, int stage_id, InputChunkMessage chunk) {
    Request& request = requests_.at(id);
    if (auto started = request.stages.find(stage_id); started != request.stages.end()) {
      if (!started->second.finished) {
        server_->send(replicas_[stage_id][started->second.replica].identity, std::move(chunk));
      }
      return;
    }
    auto& buffered = request.buffered_chunks[stage_id];
    buffered.push_back(std::move(chunk));
    if (buffered.size() == 1) forward(id, stage_id);
  }

  // Starts an async_chunk consumer with the chunks that reached the head before it could start.
  void start_streaming(Request& request, int stage_id) {
    std::deque<InputChunkMessage> chunks = std::move(request.buffered_chunks[stage_id]);
    request.buffered_chunks.erase(stage_id);
    InputChunkMessage& first = chunks.front();
    const std::string id = request.id;
    submit_to_stage(request, stage_id, std::move(first.token_ids), std::move(first.payloads), !first.last);
    chunks.pop_front();
    for (InputChunkMessage& chunk : chunks) {
      auto live = requests_.find(id);
      if (live == requests_.end()) return;
      stream_chunk(id, stage_id, std::move(chunk));
    }
  }

  bool sources_finished(const Request& request, int stage_id) const {
    for (int source : pipeline_.stages[stage_id].input_sources) {
      auto it = request.stages.find(source);
      if (it == request.stages.end() || !it->second.finished) return false;
    }
    return true;
  }

  bool edges_have_room(int stage_id) const {
    for (int source : pipeline_.stages[stage_id].input_sources) {
      if (edges_.at({source, stage_id}).in_flight >= options_.edge_inflight_limit) return false;
    }
    return true;
  }

  // Moves a request into `stage_id` (all its sources finished, or for async_chunk its source's
  // first output arrived), or queues it behind a full edge.
  void forward(const std::string& id, int stage_id) {
    if (!edges_have_room(stage_id)) {
      waiting_[stage_id].push_back(id);
      return;
    }
    Request& request = requests_.at(id);
    const StageSpec& stage = pipeline_.stages[stage_id];
    for (int source : stage.input_sources) {
      edges_.at({source, stage_id}).in_flight++;
      request.held_edges.push_back({source, stage_id});
    }
    if (stage.async_chunk) {
      start_streaming(request, stage_id);
      return;
    }
    std::vector<PayloadRef> inputs;
    for (int source : stage.input_sources) {
      for (const PayloadRef& ref : request.stages.at(source).payloads) {
        if (ref.address.to_stage == stage_id) inputs.push_back(ref);
      }
    }
    submit_to_stage(request, stage_id, request.stages.at(stage.input_sources.front()).tokens, std::move(inputs));
  }

  void release_edges_into(Request& request, int stage_id) {
    std::set<int> freed;
    for (auto it = request.held_edges.begin(); it != request.held_edges.end();) {
      if (stage_id < 0 || it->second == stage_id) {
        edges_.at(*it).in_flight--;
        freed.insert(it->second);
        it = request.held_edges.erase(it);
      } else {
        ++it;
      }
    }
    for (int stage : freed) pump_waiting(stage);
  }

  void pump_waiting(int stage_id) {
    auto& queue = waiting_[stage_id];
    while (!queue.empty() && edges_have_room(stage_id)) {
      std::string id = queue.front();
      queue.pop_front();
      if (requests_.count(id)) forward(id, stage_id);
    }
  }

  void on_error(Replica& replica, const ErrorMessage& error) {
    if (error.fatal || error.request_id.empty()) {
      replica_failed(replica, error.message);
      return;
    }
    auto it = requests_.find(error.request_id);
    if (it == requests_.end()) return;
    auto stage = it->second.stages.find(replica.stage_id);
    if (stage == it->second.stages.end() || stage->second.replica != replica.index) return;
    std::string prefix = fmt::format("stage {}", replica.stage_id);
    std::string message =
        error.message.rfind(prefix, 0) == 0 ? error.message : fmt::format("{}: {}", prefix, error.message);
    stage->second.finished = true;  // the worker already dropped it
    replica.requests.erase(error.request_id);
    end_request(error.request_id, Error(error.code, message));
  }

  // Ends a live request early: with `error`, or as aborted by the client when there is none.
  void end_request(const std::string& id, std::optional<Error> error) {
    auto it = requests_.find(id);
    if (it == requests_.end()) return;
    Request& request = it->second;
    for (auto& [stage_id, progress] : request.stages) {
      if (progress.finished) continue;
      Replica& replica = replicas_[stage_id][progress.replica];
      replica.requests.erase(id);
      if (replica.phase == Phase::kReady) server_->send(replica.identity, AbortMessage{id});
    }
    ResponseEvent event;
    if (error) {
      spdlog::warn("request {} failed: {}", id, error->what());
      event = error_event(*error);
    } else {
      event.finish_reason = "abort";
      event.finished = true;
    }
    event.prompt_tokens = request.prompt_tokens;
    event.completion_tokens = request.completion_tokens;
    deliver(request.sink, std::move(event));
    close_request(id);
  }

  // Forgets a request that has delivered its last event: unconsumed payloads go, edges free up.
  void close_request(const std::string& id) {
    auto it = requests_.find(id);
    if (it == requests_.end()) return;
    Request& request = it->second;
    // Consumers unlink what they read, so this only removes what nobody will read.
    for (auto& [stage_id, progress] : request.stages) {
      for (const PayloadRef& ref : progress.payloads) discard(ref);
    }
    for (auto& [stage_id, queue] : waiting_) std::erase(queue, id);
    release_edges_into(request, -1);
    requests_.erase(it);
    forget_id(id);
  }

  void forget_id(const std::string& id) {
    std::lock_guard lock(mutex_);
    live_ids_.erase(id);
  }

  static ResponseEvent error_event(const Error& error) {
    ResponseEvent event;
    event.error = error;
    event.finished = true;
    return event;
  }

  static void deliver(const EventSink& sink, ResponseEvent event) {
    try {
      if (sink) sink(std::move(event));
    } catch (const std::exception& e) {
      spdlog::error("an event sink threw: {}", e.what());
    }
  }

  // Immutable after construction.
  const PipelineSpec pipeline_;
  const OrchestratorOptions options_;
  const std::string session_;
  std::map<Edge, std::unique_ptr<Connector>> edge_connectors_;
  int wake_fd_ = -1;
  Histogram* dispatch_time_ = nullptr;            // null without a metrics registry
  std::vector<Histogram*> hop_time_;              // by stage id; empty without a metrics registry
  MetricFamily<Histogram>* step_time_ = nullptr;  // by stage and part; null without a metrics registry

  // Shared with API threads, under mutex_.
  mutable std::mutex mutex_;
  std::deque<Command> commands_;
  std::set<std::string> live_ids_;
  bool stopping_ = false;
  std::string failure_;
  std::vector<ReplicaInfo> replica_infos_;
  std::string endpoint_;

  // The orchestrator thread's own.
  std::optional<ControlServer> server_;
  std::vector<std::vector<Replica>> replicas_;
  std::map<std::string, std::pair<int, int>> by_identity_;
  std::map<std::string, Request> requests_;
  std::map<Edge, EdgeState> edges_;
  std::map<int, std::deque<std::string>> waiting_;

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
void Orchestrator::shutdown() { loop_->shutdown(); }
std::vector<Orchestrator::ReplicaInfo> Orchestrator::replicas() const { return loop_->replicas(); }
std::string Orchestrator::control_endpoint() const { return loop_->control_endpoint(); }
std::string Orchestrator::session() const { return loop_->session(); }

}  // namespace omni::runtime
