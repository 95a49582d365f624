// TEST ONLY: the stage runners that stand in for engines in tests (test_echo_runner.h,
// test_tone_runner.h). They are not in the production runner registry: a test that runs them in
// stage processes starts its workers from `omnistage_test` (omnistage_test_main.cc), the omnistage
// CLI with these runners registered; an in-process test calls register_test_runners() itself.
#pragma once

namespace omni::runtime {

// Registers "test-echo" and "test-tone" (runtime/stage_runner.h); calling it again is harmless.
void register_test_runners();

}  // namespace omni::runtime
