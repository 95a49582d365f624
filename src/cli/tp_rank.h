// `omnistage tp-rank` (internal): one rank of a tensor-parallel model, started by rank 0
// (runtime/tensor_parallel_model.h), never by a user.
#pragma once

#include "cli/command.h"

namespace omni::cli {

Command tp_rank_command();

}  // namespace omni::cli
