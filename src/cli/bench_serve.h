// `omnistage bench …`: benchmarks. `bench serve` is the counterpart of `vllm bench serve`: it
// loads a running OpenAI-compatible server and reports throughput and latency.
#pragma once

#include "cli/command.h"

namespace omni::cli {

Command bench_command();

}  // namespace omni::cli
