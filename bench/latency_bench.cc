// `omnistage bench latency` (src/cli/bench/latency.h) as a binary of its own, without the media
// layer's FFmpeg and codec libraries that omnistage links: the GPU machine gets its files in one
// run's carry (scripts/gpu/bundle.sh) next to the test binaries. Same flags and output:
//
//   latency_bench latency --model DIR [--load-format dummy] --device cuda --batch-size 1,8,64 ...
#include <CLI/CLI.hpp>
#include <cstdio>

#include "base/error.h"
#include "cli/bench/latency.h"
#include "model/model_registry.h"

int main(int argc, char** argv) {
  CLI::App app("omnistage bench latency, alone");
  CLI::App* sub = nullptr;
  const auto run = omni::cli::bench::add_latency_command(app, &sub);
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  try {
    return run();
  } catch (const omni::Error& e) {
    std::fprintf(stderr, "latency_bench: error: %s\n", e.what());
    return 1;
  }
}
