// `omnistage generate`: offline generation for one prompt with a single text stage model,
// the C++ counterpart of vLLM-Omni's Omni(model=...).generate for a text-only checkpoint.
#pragma once

#include "cli/command.h"

namespace omni::cli {

Command generate_command();

}  // namespace omni::cli
