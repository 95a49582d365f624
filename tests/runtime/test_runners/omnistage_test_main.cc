// TEST ONLY: `omnistage_test`, the omnistage CLI with the test runners registered
// (test_runners.h), so that tests can start stage processes that run them. Never installed.
#include "cli/app.h"
#include "runtime/test_runners/test_runners.h"

int main(int argc, char** argv) {
  omni::runtime::register_test_runners();
  return omni::cli::run(argc, argv);
}
