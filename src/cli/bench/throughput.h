// `omnistage bench throughput`: the counterpart of `vllm bench throughput`. Loads the model
// in-process, queues N random fixed-length requests at once (greedy, EOS ignored) and lets the
// engine batch them (up to --max-num-seqs at a time); reports requests/s and tokens/s.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace omni::cli::bench {

// Adds the `throughput` subcommand to `bench`; the returned function runs it (valid once parsed).
std::function<int()> add_throughput_command(CLI::App& bench, CLI::App** sub);

}  // namespace omni::cli::bench
