// `omnistage tokenize`: prints the token ids of text, one JSON line per input.
#pragma once

#include "cli/command.h"

namespace omni::cli {

Command tokenize_command();

}  // namespace omni::cli
