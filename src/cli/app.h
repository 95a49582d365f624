// The command line of the omnistage binary: global flags, subcommands, and the one boundary
// where omni::Error becomes a message on stderr and an exit code.
#pragma once

namespace omni::cli {

// Parses argv, runs the chosen subcommand and returns the process exit code. Never throws.
int run(int argc, char** argv);

}  // namespace omni::cli
