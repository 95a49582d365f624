#include "runtime/stage_worker.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <vector>

#include "runtime/connector.h"
#include "runtime/control_channel.h"
#include "runtime/stage_protocol.h"
#include "runtime/stage_runner.h"
#include "runtime/termination_signals.h"

namespace omni::runtime {

namespace {

using Clock = std::chrono::steady_clock;

struct RequestRoute {
  std::vector<int> output_stages;
  int next_chunk = 0;
  Clock::time_point submitted;  // when this worker took the Submit
  bool output_sent = false;
};

class Worker {
 public:
  Worker(const std::string& endpoint, const StageLaunchConfig& config)
      : config_(config), client_(endpoint, replica_identity(config.stage.stage_id, config.replica)) {}

  int run() {
    const int stage_id = config_.stage.stage_id;
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    client_.send(RegisterMessage{stage_id, config_.replica, getpid(), host, visible ? visible : ""});

    try {
      ConnectorContext context{config_.session, config_.shm_threshold_bytes};
      for (int from : config_.stage.input_sources) {
        inputs_[from] = make_connector(edge_connector(config_.stage, from), context);
      }
      for (const auto& [to, spec] : config_.output_connectors) outputs_[to] = make_connector(spec, context);
      runner_ = make_stage_runner(config_.stage.engine_args,
                                  StageRunnerContext{stage_id, config_.replica, visible ? visible : ""});
    } catch (const Error& e) {
      client_.send(InitFailedMessage{stage_id, config_.replica, e.code(), e.what(), e.exit_code()});
      return e.exit_code();
    } catch (const std::exception& e) {
      client_.send(InitFailedMessage{stage_id, config_.replica, ErrorCode::kInternal, e.what(),
                                     exit_code(ErrorCode::kInternal)});
      return exit_code(ErrorCode::kInternal);
    }
    client_.send(ReadyMessage{stage_id, config_.replica});
    spdlog::info("stage {} replica {} ready (pid {})", stage_id, config_.replica, getpid());
    return loop();
  }

 private:
  int loop() {
    const auto heartbeat_interval = std::chrono::milliseconds(config_.heartbeat_interval_ms);
    auto next_heartbeat = Clock::now() + heartbeat_interval;
    while (true) {
      auto now = Clock::now();
      auto idle_wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_heartbeat - now);
      client_.wait(
          runner_->can_step() ? std::chrono::milliseconds(0) : std::max(idle_wait, std::chrono::milliseconds(0)),
          termination_.fd());
      if (int signal = termination_.take()) {
        spdlog::info("stage {} replica {}: signal {}, exiting", config_.stage.stage_id, config_.replica, signal);
        return 0;
      }
      while (auto message = client_.receive()) {
        if (std::holds_alternative<ShutdownMessage>(*message)) return 0;
        handle(*message);
      }
      if (runner_->can_step()) {
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
      if (Clock::now() >= next_heartbeat || (!step_timings_.empty() && !runner_->can_step())) {
        HeartbeatMessage heartbeat{config_.stage.stage_id, config_.replica,
                                   static_cast<int64_t>(runner_->running_requests()), std::move(step_timings_)};
        for (StepTiming& t : runner_->take_step_timings()) heartbeat.step_timings.push_back(std::move(t));
        client_.send(heartbeat);
        step_timings_.clear();
        next_heartbeat = Clock::now() + heartbeat_interval;
      }
    }
  }

  int fatal(ErrorCode code, const std::string& what, int exit_status) {
    std::string message = fmt::format("stage {} replica {} failed: {}", config_.stage.stage_id, config_.replica, what);
    spdlog::error("{}", message);
    client_.send(ErrorMessage{"", code, message, true});
    return exit_status;
  }

  void request_error(const std::string& request_id, const Error& e) {
    client_.send(ErrorMessage{request_id, e.code(), e.what(), false});
    routes_.erase(request_id);
  }

  void handle(StageMessage& message) {
    if (auto* submit = std::get_if<SubmitMessage>(&message)) {
      StageRequest request{
          submit->request_id, std::move(submit->prompt_token_ids),      std::move(submit->sampling_params), {},
          submit->input_open, std::move(submit->additional_information)};
      try {
        const auto taken = Clock::now();
        request.inputs = read_payloads(submit->inputs);
        routes_[submit->request_id] = RequestRoute{submit->output_stages, 0, taken, false};
        runner_->add_request(std::move(request));
        // The messages behind this one wait for it: the head counts that wait in their hop.
        step_timings_.push_back({"add_request", std::chrono::duration<double>(Clock::now() - taken).count()});
      } catch (const Error& e) {
        request_error(submit->request_id, e);
      }
    } else if (auto* chunk = std::get_if<InputChunkMessage>(&message)) {
      if (!routes_.count(chunk->request_id)) {  // failed or aborted here already
        for (const PayloadRef& ref : chunk->payloads) {
          if (auto it = inputs_.find(ref.address.from_stage); it != inputs_.end()) it->second->discard(ref);
        }
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
      runner_->abort(abort->request_id);
      routes_.erase(abort->request_id);
    } else {
      spdlog::warn("stage {} replica {}: unexpected '{}' message from the head; ignored", config_.stage.stage_id,
                   config_.replica, message_type_name(message));
    }
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
    message.audio = std::move(output.audio);
    message.audio_sample_rate = output.audio_sample_rate;
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
    if (output.finish_reason && !output.more_choices) routes_.erase(route);
    client_.send(message);
  }

  StageLaunchConfig config_;
  TerminationSignals termination_;
  ControlClient client_;
  std::map<int, std::unique_ptr<Connector>> inputs_;
  std::map<int, std::unique_ptr<Connector>> outputs_;
  std::unique_ptr<StageRunner> runner_;
  std::map<std::string, RequestRoute> routes_;
  std::vector<StepTiming> step_timings_;  // since the last heartbeat
};

}  // namespace

Json to_json(const StageLaunchConfig& config) {
  Json outputs = Json::object();
  for (const auto& [to, spec] : config.output_connectors) outputs["to_stage_" + std::to_string(to)] = to_json(spec);
  return {{"stage", to_json(config.stage)}, {"replica", config.replica},
          {"session", config.session},      {"shm_threshold_bytes", config.shm_threshold_bytes},
          {"output_connectors", outputs},   {"heartbeat_interval_ms", config.heartbeat_interval_ms}};
}

StageLaunchConfig stage_launch_config_from_json(const Json& json, std::string_view source) {
  try {
    StageLaunchConfig config;
    config.stage = stage_spec_from_json(json.at("stage"), source);
    config.replica = json.at("replica").get<int>();
    config.session = json.at("session").get<std::string>();
    config.shm_threshold_bytes = json.at("shm_threshold_bytes").get<uint64_t>();
    config.heartbeat_interval_ms = json.at("heartbeat_interval_ms").get<int>();
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
