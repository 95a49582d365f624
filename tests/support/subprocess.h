// Runs a program to completion for tests and captures what it printed.
#pragma once

#include <string>
#include <vector>

namespace omni::testing {

struct ProcessResult {
  int exit_code = -1;  // the exit status, or 128 + signal when killed by a signal
  std::string out;
  std::string err;
};

// Runs argv[0] with argv (no shell), with `env` entries ("NAME=value") added to the environment.
ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});

}  // namespace omni::testing
