// `omnistage download MODEL [--revision R] [--download-dir D] [--config-only]`: puts the files a
// pipeline needs from a Hugging Face Hub repository into the shared Hub cache (or finds them there
// under HF_HUB_OFFLINE=1) and prints the snapshot folder, which serve, generate and config accept.
#pragma once

#include "cli/command.h"

namespace omni::cli {

Command download_command();

}  // namespace omni::cli
