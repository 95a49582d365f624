// What every fuzz target promises: bad input is rejected with an omni::Error (the clear error the
// user sees); any other exception, like a crash or a sanitizer report, is a bug the fuzzer found.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "base/error.h"

namespace omni::fuzz {

template <typename F>
void expect_only_omni_errors(const char* target, F&& run) {
  try {
    run();
  } catch (const omni::Error&) {
    // A rejected input: the expected outcome for most bytes.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: a rejection that is not an omni::Error: %s\n", target, e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "%s: an exception that is not a std::exception\n", target);
    std::abort();
  }
}

// A property of the target's output that must hold for every input.
inline void require(bool condition, const char* target, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "%s: %s\n", target, what);
    std::abort();
  }
}

}  // namespace omni::fuzz
