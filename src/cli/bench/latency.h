// `omnistage bench latency`: the counterpart of `vllm bench latency`. Loads the model in-process,
// runs one batch of random prompts (fixed input and output lengths, greedy, EOS ignored) through
// the engine several times, and reports the prefill time, the time per decode step and the whole
// batch's latency; --batch-size may list several sizes, measured one after the other on the same
// loaded model.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace omni::cli::bench {

// Adds the `latency` subcommand to `bench`; the returned function runs it (valid once parsed).
std::function<int()> add_latency_command(CLI::App& bench, CLI::App** sub);

}  // namespace omni::cli::bench
