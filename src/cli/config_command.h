// `omnistage config MODEL [serve flags] [--format table|json] [--explain]`: prints the effective
// per-stage configuration exactly as `serve` would use it, and exits. Works without the model's
// files on disk (known model ids resolve from a bundled table).
#pragma once

#include "cli/command.h"

namespace omni::cli {

Command config_command();

}  // namespace omni::cli
