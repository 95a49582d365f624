#pragma once

#include <string>

namespace omni::cli {

// "omnistage 0.1.0 (commit 1a2b3c4d5e6f)\nbackends: cpu, cuda (sm_90)"
std::string version_text();

}  // namespace omni::cli
