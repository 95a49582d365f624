// libFuzzer target: arbitrary bytes through the deploy YAML loader and the whole merge
// (overlay chain, platform section, CLI layer, --stage-overrides, validation, reports).
//
// Input: the deploy YAML, optionally followed by a NUL byte and the --stage-overrides JSON. The
// YAML is served as /fuzz/deploy.yaml; it may name /fuzz/base.yaml (the bundled
// qwen3_omni_moe.yaml) as its base_config, and its own path to exercise the cycle check. The
// first byte picks the platform. Every rejection must be an omni::Error; anything else aborts.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "base/json.h"
#include "config/config_report.h"
#include "config/deploy_schema.h"
#include "config/effective_config.h"
#include "config/json_merge.h"
#include "fuzz_guard.h"
#include "model/pipelines.h"

namespace {

const omni::config::PipelineRegistry& registry() {
  static const omni::config::PipelineRegistry instance = [] {
    omni::config::PipelineRegistry r;
    omni::model::register_all_pipelines(r);
    return r;
  }();
  return instance;
}

const std::string& bundled_base() {
  static const std::string text = omni::read_text_file(OMNI_SOURCE_DIR "/deploy/qwen3_omni_moe.yaml");
  return text;
}

void run(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const std::string platform(omni::config::kPlatformNames[data[0] % std::size(omni::config::kPlatformNames)]);
  const std::string input(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t split = input.find('\0');
  const std::string yaml = input.substr(0, split);
  const std::string overrides = split == std::string::npos ? "" : input.substr(split + 1);

  omni::config::ConfigEnvironment environment;
  environment.platform = platform;
  environment.reader = [&](const std::filesystem::path& path) -> std::string {
    if (path == "/fuzz/deploy.yaml") return yaml;
    if (path == "/fuzz/base.yaml") return bundled_base();
    omni::throw_error(omni::ErrorCode::kNotFound, "{}: not in the fuzzer's file set", path.string());
  };
  omni::config::CliConfigInputs cli;
  cli.model = "Qwen/Qwen3-Omni-30B-A3B-Instruct";
  cli.deploy_config = "/fuzz/deploy.yaml";
  cli.engine_args["max_model_len"] = 4096;
  cli.flag_names["max_model_len"] = "--max-model-len";
  cli.stage_overrides = overrides;

  omni::config::EffectiveConfig config = omni::config::build_effective_config(registry(), cli, environment);
  const std::string json = omni::config::json_text(omni::config::effective_config_json(config), 2);
  const std::string table = omni::config::effective_config_table(config, true);
  if (json.empty() || table.empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  omni::fuzz::expect_only_omni_errors("deploy_fuzzer", [&] { run(data, size); });
  return 0;
}
