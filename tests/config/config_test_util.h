// Shared helpers of the config tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "base/error.h"
#include "config/effective_config.h"
#include "model/pipelines.h"

namespace omni::config::testing {

// Runs `body`, expects an omni::Error with `code`, and returns its message ("" when none).
template <typename Body>
std::string error_message(Body&& body, ErrorCode code) {
  try {
    body();
  } catch (const Error& e) {
    EXPECT_EQ(error_code_name(e.code()), error_code_name(code)) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected an omni::Error(" << error_code_name(code) << ")";
  return "";
}

inline const PipelineRegistry& real_registry() {
  static const PipelineRegistry registry = [] {
    PipelineRegistry r;
    model::register_all_pipelines(r);
    return r;
  }();
  return registry;
}

inline ConfigEnvironment environment(const std::string& platform = "cuda") {
  ConfigEnvironment env;
  env.bundled_deploy_dir = std::string(OMNI_SOURCE_DIR) + "/deploy";
  env.platform = platform;
  return env;
}

inline const EffectiveStage& stage(const EffectiveConfig& config, int id) {
  for (const auto& s : config.stages) {
    if (s.topology->stage_id == id) return s;
  }
  throw std::runtime_error("no stage " + std::to_string(id));
}

inline std::string source(const EffectiveStage& s, const std::string& key) {
  auto it = s.sources.find(key);
  return it == s.sources.end() ? "<none>" : it->second.label();
}

}  // namespace omni::config::testing
