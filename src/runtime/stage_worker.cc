#include "runtime/stage_worker.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <vector>

#include "runtime/connector.h"
#include "runtime/control_channel.h"
#include "runtime/stage_protocol.h"
#include "runtime/stage_runner.h"
#include "runtime/termination_signals.h"
#include "tensor/backend.h"

namespace omni::runtime {

namespace {

using Clock = std::chrono::steady_clock;

// The channel a request came in on: -1 for the head's, else the frontend's index.
constexpr int kHeadChannel = -1;

struct RequestRoute {
  std::vector<int> output_stages;
  int next_chunk = 0;
  Clock::time_point submitted;  // when this worker took the Submit
  bool output_sent = false;
  int channel = kHeadChannel;
};

// The process's resident set size, from /proc/self/statm (0 when unreadable).
int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0;
  int64_t resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

class Worker {
 public:
  Worker(const std::string& endpoint, const StageLaunchConfig& config)
      : config_(config), endpoint_(endpoint), client_(endpoint, identity(config)) {
    for (size_t i = 0; i < config_.frontend_endpoints.size(); ++i) frontends_.push_back(connect_frontend(i));
  }

  int run() {
    const int stage_id = config_.stage.stage_id;
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    register_message_ = RegisterMessage{stage_id, config_.replica, getpid(), host_name(), visible ? visible : ""};
    if (config_.join) {
      register_message_.replica = -1;
      register_message_.address = config_.join->address;
      register_message_.pipeline = config_.join->pipeline;
      if (int refused = join(std::chrono::milliseconds(config_.join->stage_init_timeout_ms))) return refused;
    } else {
      client_.send(register_message_);
    }

    try {
      make_connectors();
      runner_ = build_runner();
    } catch (const Error& e) {
      client_.send(InitFailedMessage{stage_id, config_.replica, e.code(), e.what(), e.exit_code()});
      return e.exit_code();
    } catch (const std::exception& e) {
      client_.send(InitFailedMessage{stage_id, config_.replica, ErrorCode::kInternal, e.what(),
                                     exit_code(ErrorCode::kInternal)});
      return exit_code(ErrorCode::kInternal);
    }
    client_.send(ReadyMessage{stage_id, config_.replica});
    for (auto& frontend : frontends_) announce(*frontend);
    spdlog::info("stage {} replica {} ready (pid {}{})", stage_id, config_.replica, getpid(),
                 frontends_.empty() ? "" : fmt::format(", serving {} API frontends", frontends_.size()));
    return loop();
  }

 private:
  static std::string host_name() {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    return host;
  }

  // A headless worker's replica is named by its host and pid until the head gives it an index.
  static std::string identity(const StageLaunchConfig& config) {
    if (!config.join) return replica_identity(config.stage.stage_id, config.replica);
    return fmt::format("stage{}.{}.{}", config.stage.stage_id, host_name(), getpid());
  }

  void make_connectors() {
    ConnectorContext context{config_.session, config_.shm_threshold_bytes, config_.retain_inputs, inline_payloads_};
    inputs_.clear();
    outputs_.clear();
    for (int from : config_.stage.input_sources) {
      inputs_[from] = make_connector(edge_connector(config_.stage, from), context);
    }
    for (const auto& [to, spec] : config_.output_connectors) {
      outputs_[to] = make_connector(spec, context);
      if (inline_payloads_) {
        spdlog::info(
            "stage {} replica {}: the edge to stage {} ({}) carries its payloads inline through the control "
            "connection: this replica is on another host than the head",
            config_.stage.stage_id, config_.replica, to, spec.name);
      }
    }
  }

  // Registers with the head (again after a head restart) until it answers: the Register is sent
  // again every second, for a head that is not up yet or lost it. Returns 0 once accepted, else
  // the exit code (refused, or no answer within `timeout`; zero timeout: wait for ever).
  int join(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    auto next_send = Clock::now();
    while (true) {
      if (Clock::now() >= next_send) {
        client_.send(register_message_);
        next_send = Clock::now() + std::chrono::seconds(1);
      }
      if (timeout.count() > 0 && Clock::now() > deadline) {
        spdlog::error("stage {}: the head at {} did not answer the registration within --stage-init-timeout={}s",
                      config_.stage.stage_id, endpoint_, timeout.count() / 1000.0);
        client_.drop_unsent();  // the Registers queued for a head that never came
        return exit_code(ErrorCode::kTimeout);
      }
      client_.wait(std::chrono::milliseconds(100), termination_.fd());
      if (int signal = termination_.take()) {
        spdlog::info("stage {}: signal {} while registering, exiting", config_.stage.stage_id, signal);
        return 128 + signal;
      }
      while (auto message = client_.receive()) {
        auto* reply = std::get_if<JoinReplyMessage>(&*message);
        if (!reply) continue;  // what the old head's queue still held
        if (!reply->accepted) {
          spdlog::error("stage {}: the head refused this worker: {}", config_.stage.stage_id, reply->message);
          return exit_code(ErrorCode::kInvalidConfig);
        }
        config_.replica = reply->replica;
        config_.session = reply->session;
        config_.retain_inputs = reply->retain_inputs;
        inline_payloads_ = reply->inline_payloads;
        register_message_.replica = -1;
        spdlog::info("stage {}: registered with the head at {} as replica {}", config_.stage.stage_id, endpoint_,
                     config_.replica);
        return 0;
      }
    }
  }

  // The head restarted and does not know this replica: its requests are gone with the old head.
  int rejoin() {
    spdlog::warn("stage {} replica {}: the head at {} does not know this replica (it restarted); registering again",
                 config_.stage.stage_id, config_.replica, endpoint_);
    std::vector<std::string> ids;
    for (const auto& [id, route] : routes_) ids.push_back(id);
    for (const std::string& id : ids) {
      if (runner_) runner_->abort(id);
    }
    routes_.clear();
    if (int refused = join(std::chrono::milliseconds(0))) return refused;
    try {
      make_connectors();
    } catch (const Error& e) {
      return fatal(e.code(), e.what(), e.exit_code());
    }
    client_.send(ReadyMessage{config_.stage.stage_id, config_.replica});
    return 0;
  }

  std::unique_ptr<StageRunner> build_runner() const {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return make_stage_runner(config_.stage.engine_args,
                             StageRunnerContext{config_.stage.stage_id, config_.replica, visible ? visible : ""});
  }

  std::unique_ptr<ControlClient> connect_frontend(size_t index) const {
    return std::make_unique<ControlClient>(config_.frontend_endpoints[index],
                                           replica_identity(config_.stage.stage_id, config_.replica));
  }

  // Register and Ready on a frontend's channel: they wait in the socket until the frontend binds.
  void announce(ControlClient& frontend) {
    frontend.send(register_message_);
    frontend.send(ReadyMessage{config_.stage.stage_id, config_.replica});
  }

  ControlClient& channel(int index) { return index == kHeadChannel ? client_ : *frontends_[index]; }

  std::vector<ControlClient*> all_channels() {
    std::vector<ControlClient*> channels{&client_};
    for (auto& frontend : frontends_) channels.push_back(frontend.get());
    return channels;
  }

  bool can_step() const { return runner_ && runner_->can_step(); }

  int loop() {
    const auto heartbeat_interval = std::chrono::milliseconds(config_.heartbeat_interval_ms);
    auto next_heartbeat = Clock::now() + heartbeat_interval;
    while (true) {
      auto now = Clock::now();
      auto idle_wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_heartbeat - now);
      wait_any(all_channels(),
               can_step() ? std::chrono::milliseconds(0) : std::max(idle_wait, std::chrono::milliseconds(0)),
               termination_.fd());
      if (int signal = termination_.take()) {
        spdlog::info("stage {} replica {}: signal {}, exiting", config_.stage.stage_id, config_.replica, signal);
        if (config_.join) client_.send(LeaveMessage{config_.stage.stage_id, config_.replica});
        return 0;
      }
      while (auto message = client_.receive()) {
        if (std::holds_alternative<RejoinMessage>(*message)) {
          if (!config_.join) continue;
          if (int status = rejoin()) return status;
          next_heartbeat = Clock::now();
          continue;
        }
        if (std::holds_alternative<ShutdownMessage>(*message)) {
          // The launcher stops the frontends first: what is queued for them has nobody to read it.
          for (auto& frontend : frontends_) frontend->drop_unsent();
          return 0;
        }
        handle(*message, kHeadChannel);
      }
      for (int i = 0; i < static_cast<int>(frontends_.size()); ++i) {
        // A reset replaces the channel, so it is looked up again for every message.
        while (auto message = frontends_[i]->receive()) handle(*message, i);
      }
      if (can_step()) {
        std::vector<StageOutput> outputs;
        try {
          const auto started = Clock::now();
          outputs = runner_->step();
          step_timings_.push_back({"step", std::chrono::duration<double>(Clock::now() - started).count()});
        } catch (const Error& e) {
          return fatal(e.code(), e.what(), e.exit_code());
        } catch (const std::exception& e) {
          return fatal(ErrorCode::kInternal, e.what(), exit_code(ErrorCode::kInternal));
        }
        for (StageOutput& output : outputs) send_output(output);
      }
      // The step timings also leave as soon as the stage goes idle, so that the head's metrics
      // hold every step of a finished run.
      if (Clock::now() >= next_heartbeat || (!step_timings_.empty() && !can_step())) {
        send_heartbeats();
        next_heartbeat = Clock::now() + heartbeat_interval;
      }
    }
  }

  // Every channel hears that the replica is alive; the step timings go to one of them only (the
  // head, or the first frontend), so that they are counted once in the metrics.
  void send_heartbeats() {
    HeartbeatMessage heartbeat{config_.stage.stage_id, config_.replica,
                               runner_ ? static_cast<int64_t>(runner_->running_requests()) : 0,
                               std::move(step_timings_)};
    if (runner_) {
      for (StepTiming& t : runner_->take_step_timings()) heartbeat.step_timings.push_back(std::move(t));
    }
    step_timings_.clear();
    HeartbeatMessage plain{heartbeat.stage_id, heartbeat.replica, heartbeat.running_requests, {}};
    client_.send(frontends_.empty() ? heartbeat : plain);
    for (size_t i = 0; i < frontends_.size(); ++i) frontends_[i]->send(i == 0 ? heartbeat : plain);
  }

  int fatal(ErrorCode code, const std::string& what, int exit_status) {
    std::string message = fmt::format("stage {} replica {} failed: {}", config_.stage.stage_id, config_.replica, what);
    spdlog::error("{}", message);
    for (ControlClient* c : all_channels()) c->send(ErrorMessage{"", code, message, true});
    return exit_status;
  }

  void request_error(const std::string& request_id, const Error& e) {
    auto route = routes_.find(request_id);
    channel(route == routes_.end() ? kHeadChannel : route->second.channel)
        .send(ErrorMessage{request_id, e.code(), e.what(), false});
    if (route != routes_.end()) routes_.erase(route);
  }

  void handle(StageMessage& message, int from) {
    if (auto* submit = std::get_if<SubmitMessage>(&message)) {
      if (asleep_level_ > 0 || routes_.count(submit->request_id)) {
        Error refused(ErrorCode::kUnavailable,
                      asleep_level_ > 0
                          ? fmt::format("stage {} is asleep (POST /v1/omni/wakeup wakes it)", config_.stage.stage_id)
                          : fmt::format("stage {}: request id '{}' is in use by another API frontend",
                                        config_.stage.stage_id, submit->request_id));
        channel(from).send(ErrorMessage{submit->request_id, refused.code(), refused.what(), false});
        for (const PayloadRef& ref : submit->inputs) discard_input(ref);
        return;
      }
      StageRequest request{
          submit->request_id, std::move(submit->prompt_token_ids),      std::move(submit->sampling_params), {},
          submit->input_open, std::move(submit->additional_information)};
      try {
        const auto taken = Clock::now();
        routes_[submit->request_id] = RequestRoute{submit->output_stages, 0, taken, false, from};
        request.inputs = read_payloads(submit->inputs);
        request.feeds_downstream = !submit->output_stages.empty();
        runner_->add_request(std::move(request));
        // The messages behind this one wait for it: the head counts that wait in their hop.
        step_timings_.push_back({"add_request", std::chrono::duration<double>(Clock::now() - taken).count()});
      } catch (const Error& e) {
        request_error(submit->request_id, e);
      }
    } else if (auto* chunk = std::get_if<InputChunkMessage>(&message)) {
      auto route = routes_.find(chunk->request_id);
      if (route == routes_.end() || route->second.channel != from) {  // failed or aborted here already
        for (const PayloadRef& ref : chunk->payloads) discard_input(ref);
        return;
      }
      try {
        runner_->add_input(chunk->request_id,
                           StageInputChunk{std::move(chunk->token_ids), read_payloads(chunk->payloads), chunk->last});
      } catch (const Error& e) {
        runner_->abort(chunk->request_id);
        request_error(chunk->request_id, e);
      }
    } else if (auto* abort = std::get_if<AbortMessage>(&message)) {
      auto route = routes_.find(abort->request_id);
      if (route == routes_.end() || route->second.channel != from) return;
      runner_->abort(abort->request_id);
      routes_.erase(route);
    } else if (auto* reset = std::get_if<FrontendResetMessage>(&message)) {
      reset_frontend(reset->frontend);
    } else if (auto* sleep = std::get_if<SleepMessage>(&message)) {
      channel(from).send(put_to_sleep(sleep->level));
    } else if (std::holds_alternative<WakeUpMessage>(message)) {
      channel(from).send(wake_up());
    } else {
      spdlog::warn("stage {} replica {}: unexpected '{}' message from the head; ignored", config_.stage.stage_id,
                   config_.replica, message_type_name(message));
    }
  }

  void discard_input(const PayloadRef& ref) {
    if (auto it = inputs_.find(ref.address.from_stage); it != inputs_.end()) it->second->discard(ref);
  }

  // A frontend ended: its requests go, and a new channel waits for the frontend started in its place.
  void reset_frontend(int index) {
    if (index < 0 || index >= static_cast<int>(frontends_.size())) {
      spdlog::warn("stage {} replica {}: reset of unknown API frontend {} ignored", config_.stage.stage_id,
                   config_.replica, index);
      return;
    }
    int dropped = 0;
    for (auto it = routes_.begin(); it != routes_.end();) {
      if (it->second.channel == index) {
        if (runner_) runner_->abort(it->first);
        it = routes_.erase(it);
        ++dropped;
      } else {
        ++it;
      }
    }
    frontends_[index]->drop_unsent();
    frontends_[index].reset();
    frontends_[index] = connect_frontend(index);
    announce(*frontends_[index]);
    spdlog::info("stage {} replica {}: API frontend {} reset ({} of its requests dropped)", config_.stage.stage_id,
                 config_.replica, index, dropped);
  }

  // Ends every request on this replica with `reason` (sleep).
  void end_all_requests(const std::string& reason) {
    std::vector<std::string> ids;
    for (const auto& [id, route] : routes_) ids.push_back(id);
    for (const std::string& id : ids) {
      if (runner_) runner_->abort(id);
      request_error(id, Error(ErrorCode::kUnavailable, reason));
    }
  }

  // Runs a sleep or wake-up `change` of this replica and acknowledges it: the level it is at
  // afterwards, its resident memory before and after, the seconds taken, and the error (for this
  // operation only) when `change` threw.
  template <typename Change>
  StageControlAck control(const char* operation, Change&& change) {
    StageControlAck ack{
        config_.stage.stage_id, config_.replica, operation, asleep_level_, resident_bytes(), 0, 0, {}, {}};
    const auto started = Clock::now();
    try {
      change();
    } catch (const Error& e) {
      ack.error = e.code();
      ack.message = fmt::format("stage {} replica {}: {}", config_.stage.stage_id, config_.replica, e.what());
    }
    ack.level = asleep_level_;
    ack.rss_after_bytes = resident_bytes();
    ack.seconds = std::chrono::duration<double>(Clock::now() - started).count();
    spdlog::info("stage {} replica {}: {} (level {} now) in {:.3f}s, resident {} -> {} bytes{}", config_.stage.stage_id,
                 config_.replica, operation, ack.level, ack.seconds, ack.rss_before_bytes, ack.rss_after_bytes,
                 ack.error ? ": " + ack.message : "");
    return ack;
  }

  StageControlAck put_to_sleep(int level) {
    return control("sleep", [&] {
      if (level != 1 && level != 2) {
        throw_error(ErrorCode::kInvalidArgument, "sleep level must be 1 or 2, not {}", level);
      }
      if (level <= asleep_level_) return;
      end_all_requests(fmt::format("stage {} was put to sleep", config_.stage.stage_id));
      if (level == 1) {
        runner_->sleep();
      } else {
        const tensor::Device device = runner_->device();
        runner_.reset();
        tensor::release_freed_memory(device);
        tensor::release_freed_memory(tensor::Device::cpu());
      }
      asleep_level_ = level;
    });
  }

  StageControlAck wake_up() {
    return control("wakeup", [&] {
      if (asleep_level_ == 1) runner_->wake_up();
      if (asleep_level_ == 2) runner_ = build_runner();
      asleep_level_ = 0;
    });
  }

  std::vector<PayloadView> read_payloads(const std::vector<PayloadRef>& refs) {
    std::vector<PayloadView> views;
    views.reserve(refs.size());
    for (const PayloadRef& ref : refs) {
      auto connector = inputs_.find(ref.address.from_stage);
      if (connector == inputs_.end()) {
        throw_error(ErrorCode::kInternal, "stage {}: payload {} comes from stage {}, which is not an input source",
                    config_.stage.stage_id, ref.address.key(), ref.address.from_stage);
      }
      views.push_back(connector->second->get(ref));
    }
    return views;
  }

  void send_output(StageOutput& output) {
    auto route = routes_.find(output.request_id);
    if (route == routes_.end()) return;  // aborted while the step ran
    if (output.error) {
      request_error(output.request_id, *output.error);
      return;
    }
    OutputMessage message;
    message.request_id = output.request_id;
    message.token_ids = std::move(output.token_ids);
    message.text = std::move(output.text);
    message.finish_reason = output.finish_reason;
    message.logprobs = std::move(output.logprobs);
    message.index = output.index;
    message.more_choices = output.more_choices;
    message.prompt_tokens = output.prompt_tokens;
    message.audio = std::move(output.audio);
    message.audio_sample_rate = output.audio_sample_rate;
    message.image = std::move(output.image);
    if (output.payload) {
      try {
        for (int to : route->second.output_stages) {
          auto connector = outputs_.find(to);
          if (connector == outputs_.end()) {
            throw_error(ErrorCode::kInternal, "stage {}: no connector for the edge to stage {}", config_.stage.stage_id,
                        to);
          }
          PayloadAddress address{output.request_id, config_.stage.stage_id, to, route->second.next_chunk};
          message.payloads.push_back(connector->second->put(address, *output.payload));
        }
      } catch (const Error& e) {
        for (const PayloadRef& ref : message.payloads) outputs_[ref.address.to_stage]->discard(ref);
        runner_->abort(output.request_id);
        request_error(output.request_id, e);
        return;
      }
      ++route->second.next_chunk;
    }
    if (!route->second.output_sent) {
      route->second.output_sent = true;
      message.stage_seconds = std::chrono::duration<double>(Clock::now() - route->second.submitted).count();
    }
    ControlClient& out = channel(route->second.channel);
    if (output.finish_reason && !output.more_choices) routes_.erase(route);
    out.send(message);
  }

  StageLaunchConfig config_;
  std::string endpoint_;
  bool inline_payloads_ = false;  // JoinReplyMessage::inline_payloads
  TerminationSignals termination_;
  ControlClient client_;
  std::vector<std::unique_ptr<ControlClient>> frontends_;  // by frontend index
  RegisterMessage register_message_;
  std::map<int, std::unique_ptr<Connector>> inputs_;
  std::map<int, std::unique_ptr<Connector>> outputs_;
  std::unique_ptr<StageRunner> runner_;  // null while asleep at level 2
  int asleep_level_ = 0;
  std::map<std::string, RequestRoute> routes_;
  std::vector<StepTiming> step_timings_;  // since the last heartbeat
};

}  // namespace

Json to_json(const StageLaunchConfig& config) {
  Json outputs = Json::object();
  for (const auto& [to, spec] : config.output_connectors) outputs["to_stage_" + std::to_string(to)] = to_json(spec);
  return {{"stage", to_json(config.stage)},
          {"replica", config.replica},
          {"session", config.session},
          {"shm_threshold_bytes", config.shm_threshold_bytes},
          {"output_connectors", outputs},
          {"heartbeat_interval_ms", config.heartbeat_interval_ms},
          {"frontend_endpoints", config.frontend_endpoints},
          {"retain_inputs", config.retain_inputs},
          {"join", config.join ? Json{{"address", config.join->address},
                                      {"pipeline", config.join->pipeline},
                                      {"stage_init_timeout_ms", config.join->stage_init_timeout_ms}}
                               : Json(nullptr)}};
}

StageLaunchConfig stage_launch_config_from_json(const Json& json, std::string_view source) {
  try {
    StageLaunchConfig config;
    config.stage = stage_spec_from_json(json.at("stage"), source);
    config.replica = json.at("replica").get<int>();
    config.session = json.at("session").get<std::string>();
    config.shm_threshold_bytes = json.at("shm_threshold_bytes").get<uint64_t>();
    config.heartbeat_interval_ms = json.at("heartbeat_interval_ms").get<int>();
    config.frontend_endpoints = json.value("frontend_endpoints", std::vector<std::string>{});
    config.retain_inputs = json.value("retain_inputs", false);
    if (auto join = json.find("join"); join != json.end() && !join->is_null()) {
      config.join = StageJoin{join->at("address").get<std::string>(), join->at("pipeline"),
                              join->at("stage_init_timeout_ms").get<int>()};
    }
    for (const auto& [key, value] : json.at("output_connectors").items()) {
      constexpr std::string_view kPrefix = "to_stage_";
      if (key.rfind(kPrefix, 0) != 0) {
        throw_error(ErrorCode::kInvalidConfig, "{}: output_connectors key '{}' must be to_stage_<id>", source, key);
      }
      config.output_connectors[std::stoi(key.substr(kPrefix.size()))] =
          connector_spec_from_json(value, fmt::format("{}: output_connectors.{}", source, key));
    }
    return config;
  } catch (const Json::exception& e) {
    throw_error(ErrorCode::kInvalidConfig, "{}: not a stage launch config: {}", source, e.what());
  } catch (const std::logic_error& e) {
    throw_error(ErrorCode::kInvalidConfig, "{}: not a stage launch config: {}", source, e.what());
  }
}

int run_stage_worker(const std::string& head_endpoint, const StageLaunchConfig& config) {
  Worker worker(head_endpoint, config);
  return worker.run();
}

}  // namespace omni::runtime
