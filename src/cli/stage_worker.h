// `omnistage stage-worker --head ENDPOINT --launch-config JSON`: the internal subcommand a stage
// replica process runs (runtime/stage_worker.h). The head (runtime::Orchestrator) starts it; it is
// hidden from --help because people do not run it by hand.
#pragma once

#include "cli/command.h"

namespace omni::cli {

Command stage_worker_command();

}  // namespace omni::cli
