// `omnistage config MODEL [serve flags] [--format table|json] [--explain]`: prints the effective
// per-stage configuration exactly as `serve` would use it, and exits. Works without the model's
// files on disk: a known model id resolves from a bundled table; another Hugging Face id needs only
// its configuration files, which are downloaded into the Hub cache (cli/model_source.h).
#pragma once

#include "cli/command.h"

namespace omni::cli {

Command config_command();

}  // namespace omni::cli
