#include "runtime/test_runners/test_runners.h"

#include <memory>
#include <string>

#include "runtime/stage_runner.h"
#include "runtime/test_runners/test_echo_runner.h"
#include "runtime/test_runners/test_tone_runner.h"

namespace omni::runtime {

void register_test_runners() {
  register_stage_runner(std::string(kTestEchoRunnerKind), [](const Json& args, const StageRunnerContext& context) {
    return std::make_unique<TestEchoRunner>(TestEchoRunner::Options::from_engine_args(args, context), context);
  });
  register_stage_runner(std::string(kTestToneRunnerKind), [](const Json& args, const StageRunnerContext& context) {
    return std::make_unique<TestToneRunner>(args, context);
  });
}

}  // namespace omni::runtime
