#include "cli/stage_worker.h"

#include "base/json.h"
#include "runtime/stage_worker.h"

namespace omni::cli {

Command stage_worker_command() {
  return {"stage-worker", "Run one stage replica for a head process (internal)", [](CLI::App& sub) {
            sub.group("");
            auto head = std::make_shared<std::string>();
            auto launch_config = std::make_shared<std::string>();
            sub.add_option("--head", *head, "The head's control endpoint (ipc://… or tcp://host:port)")->required();
            sub.add_option("--launch-config", *launch_config, "The replica's launch config as JSON")->required();
            return [head, launch_config]() {
              auto config = runtime::stage_launch_config_from_json(parse_json(*launch_config, "--launch-config"),
                                                                   "--launch-config");
              return runtime::run_stage_worker(*head, config);
            };
          }};
}

}  // namespace omni::cli
