#include "cli/api_frontends.h"

#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "runtime/child_process.h"
#include "runtime/termination_signals.h"
#include "server/frontend_metrics.h"
#include "server/port_reservation.h"

namespace omni::cli {

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kRoleVariable = "OMNISTAGE_API_FRONTEND";
constexpr std::chrono::milliseconds kRestartDelay{200};
constexpr std::chrono::milliseconds kFrontendStopGrace{10'000};

// This process's own command line, to start the frontends with.
std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t begin = 0; begin < all.size();) {
    size_t end = all.find('\0', begin);
    if (end == std::string::npos) end = all.size();
    args.push_back(all.substr(begin, end - begin));
    begin = end + 1;
  }
  if (args.empty()) throw_error(ErrorCode::kInternal, "cannot read this process's command line");
  args[0] = "/proc/self/exe";
  return args;
}

struct Frontend {
  int index = 0;
  std::optional<runtime::ChildProcess> process;
  Clock::time_point started;
};

class Launcher {
 public:
  Launcher(const runtime::PipelineSpec& pipeline, runtime::OrchestratorOptions options, std::string host, uint16_t port,
           int count)
      : count_(count),
        host_(std::move(host)),
        address_(host_, port),
        orchestrator_(pipeline, with_frontends(std::move(options), count)),
        arguments_(own_arguments()) {
    frontends_.resize(count);
    for (int i = 0; i < count; ++i) frontends_[i].index = i;
  }

  int run(const runtime::TerminationSignals& signals, std::chrono::milliseconds init_timeout) {
    try {
      for (Frontend& f : frontends_) start(f);
      wait_until_serving(signals, init_timeout);
    } catch (...) {
      stop();
      throw;
    }
    spdlog::info("serve: session {}, shared-memory segments /dev/shm/omnistage_{}_*", orchestrator_.session(),
                 orchestrator_.session());
    spdlog::info("serve: {} API frontends ready on http://{}:{} (Ctrl-C stops them)", count_, host_, address_.port());
    while (true) {
      pollfd item{signals.fd(), POLLIN, 0};
      ::poll(&item, 1, 100);
      if (int signal = signals.take()) {
        spdlog::info("serve: {} received, shutting down", strsignal(signal));
        break;
      }
      for (Frontend& f : frontends_) {
        if (auto status = f.process->poll()) restart(f, *status);
      }
    }
    stop();
    return 0;
  }

 private:
  static runtime::OrchestratorOptions with_frontends(runtime::OrchestratorOptions options, int count) {
    options.api_frontends = count;
    return options;
  }

  void start(Frontend& f) {
    std::filesystem::remove(server::FrontendMetrics::snapshot_path(orchestrator_.session(), f.index));
    const Json role = {
        {"session", orchestrator_.session()}, {"index", f.index}, {"count", count_}, {"port", address_.port()}};
    f.process = runtime::ChildProcess::spawn(arguments_, {std::string(kRoleVariable) + "=" + role.dump()});
    f.started = Clock::now();
    spdlog::info("serve: API frontend {} started, pid {}", f.index, f.process->pid());
  }

  void restart(Frontend& f, const runtime::ExitStatus& status) {
    spdlog::error("serve: API frontend {} (pid {}) {}; its requests failed, starting it again", f.index,
                  f.process->pid(), status.describe());
    orchestrator_.reset_frontend(f.index);
    // A frontend that cannot start at all should not spin.
    if (Clock::now() - f.started < std::chrono::seconds(2)) std::this_thread::sleep_for(kRestartDelay);
    start(f);
  }

  void wait_until_serving(const runtime::TerminationSignals& signals, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (true) {
      int serving = 0;
      for (Frontend& f : frontends_) {
        if (auto status = f.process->poll()) {
          throw_error(ErrorCode::kUnavailable, "API frontend {} {} before it was serving (its log is above)", f.index,
                      status->describe());
        }
        if (std::filesystem::exists(server::FrontendMetrics::snapshot_path(orchestrator_.session(), f.index))) {
          ++serving;
        }
      }
      if (serving == count_) return;
      if (signals.take()) throw_error(ErrorCode::kUnavailable, "shut down while the API frontends were starting");
      if (Clock::now() > deadline) {
        throw_error(ErrorCode::kTimeout, "{} of {} API frontends were serving within --init-timeout={}s", serving,
                    count_, std::chrono::duration<double>(timeout).count());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Frontends first (they drain their requests), then the replicas.
  void stop() {
    for (Frontend& f : frontends_) {
      if (f.process && !f.process->poll()) f.process->signal_group(SIGTERM);
    }
    const auto deadline = Clock::now() + kFrontendStopGrace;
    for (Frontend& f : frontends_) {
      if (!f.process) continue;
      auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                           std::chrono::milliseconds(0));
      f.process->wait_or_kill(left);
    }
    orchestrator_.shutdown();
  }

  const int count_;
  const std::string host_;
  server::PortReservation address_;  // first: a taken port fails before any stage starts
  runtime::Orchestrator orchestrator_;
  const std::vector<std::string> arguments_;
  std::vector<Frontend> frontends_;
};

}  // namespace

std::optional<ApiFrontendRole> api_frontend_role() {
  const char* value = std::getenv(kRoleVariable);
  if (value == nullptr) return std::nullopt;
  try {
    Json role = Json::parse(value);
    ApiFrontendRole out;
    out.attach.session = role.at("session").get<std::string>();
    out.attach.index = role.at("index").get<int>();
    out.attach.count = role.at("count").get<int>();
    out.port = role.at("port").get<uint16_t>();
    return out;
  } catch (const Json::exception& e) {
    throw_error(ErrorCode::kInvalidArgument, "{}: not an API frontend role ({}): {}", kRoleVariable, e.what(), value);
  }
}

void check_api_frontends_config(const config::EffectiveConfig& config) {
  for (size_t i = 0; i < config.stages.size(); ++i) {
    const config::EffectiveStage& stage = config.stages[i];
    if (stage.topology->execution_type == config::ExecutionType::kDiffusion) {
      throw_error(ErrorCode::kInvalidArgument,
                  "--api-server-count > 1 cannot serve diffusion stages: stage {} ({}) of pipeline {} is one", i,
                  stage.topology->model_stage, config.pipeline->model_type);
    }
    if (auto it = stage.engine_args.find("data_parallel_size");
        it != stage.engine_args.end() && it->is_number_integer() && it->get<int64_t>() > 1) {
      throw_error(ErrorCode::kInvalidArgument,
                  "--api-server-count > 1 requires data_parallel_size 1 in every stage: stage {} has {} (use "
                  "num_replicas for more copies of a stage)",
                  i, it->get<int64_t>());
    }
    if (auto it = stage.engine_args.find("enable_sleep_mode");
        it != stage.engine_args.end() && it->is_boolean() && it->get<bool>()) {
      throw_error(ErrorCode::kInvalidArgument,
                  "--api-server-count > 1 cannot be combined with sleep mode: stage {} sets enable_sleep_mode", i);
    }
  }
}

int run_api_frontend_launcher(const ServeFlags& flags, const runtime::PipelineSpec& pipeline,
                              runtime::OrchestratorOptions options, int count) {
  // Before any thread starts, so that SIGINT/SIGTERM reach only this thread.
  runtime::TerminationSignals signals;
  const std::string host = flags.values["host"].is_null() ? "0.0.0.0" : flags.values["host"].get<std::string>();
  const auto port = static_cast<uint16_t>(flags.values["port"].get<int64_t>());
  const std::chrono::milliseconds init_timeout = options.init_timeout;
  Launcher launcher(pipeline, std::move(options), host, port, count);
  return launcher.run(signals, init_timeout);
}

}  // namespace omni::cli
