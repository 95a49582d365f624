// `omnistage serve MODEL [flags]`: resolves, merges and validates the configuration, then starts
// the stages and the API server (the runtime arrives with issue 6; until then serve stops with
// omni::Error(kUnsupported) naming the pipeline and the stage that cannot run yet).
#pragma once

#include "cli/command.h"

namespace omni::cli {

Command serve_command();

}  // namespace omni::cli
