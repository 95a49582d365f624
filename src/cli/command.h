// The subcommands of the omnistage binary. Each subcommand lives in its own file in cli/ and
// returns its Command; app.cc lists them all, parses the command line and runs the chosen one.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace omni::cli {

struct Command {
  std::string name;
  std::string description;
  // Declares the subcommand's flags on `sub`; returns what to run once parsing succeeded.
  // The returned function's result is the process exit code; it may throw omni::Error.
  std::function<std::function<int()>(CLI::App& sub)> setup;
  // Optional: rewrites the arguments that follow the subcommand's name before CLI11 sees them
  // (for flag spellings CLI11 cannot declare). May throw omni::Error(kInvalidArgument).
  std::function<std::vector<std::string>(const std::vector<std::string>&)> rewrite_args;
};

// Every subcommand, in the order --help lists them.
std::vector<Command> all_commands();

}  // namespace omni::cli
