// Loading deploy YAMLs: the base_config overlay chain, the platforms: section of the running
// platform, and parsing into the typed DeployConfig with the provenance of every stage field.
//
// Merge rules (vLLM-Omni resolve_deploy_yaml / _apply_platform_overrides):
// - base_config is resolved first, relative to the overlay file's directory (a bare file name
//   that is not there is also looked up in the bundled deploy directory); cycles are errors.
// - Top-level keys: overlay wins; `connectors:` merged per connector; `stages:` merged by
//   stage_id with default_sampling_params, default_pooling_params, subtalker_sampling_params and
//   engine_extras merged recursively; new stage ids are appended.
// - `platforms:` merged per platform and per stage_id the same way; then the section of the
//   running platform is applied to the stages it names (devices replaced, env and the dict
//   fields merged one level, other keys set).
// - A stage entry may be flat or use the nested engine_args:/runtime: layout; keys the schema
//   does not know fall through to engine_extras. Legacy `stage_args:` is rejected.
// Every function is reentrant; errors are omni::Error naming the file (and stage and field).
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include "config/deploy_schema.h"

namespace omni::config {

// Reads a deploy file's text. Throws omni::Error (kNotFound) when it cannot.
using DeployFileReader = std::function<std::string(const std::filesystem::path&)>;

// The reader used outside tests: regular files only (so a path to a device or a FIFO cannot hang
// the loader).
std::string read_deploy_file(const std::filesystem::path& path);

struct DeployLoadOptions {
  std::filesystem::path bundled_dir;  // the bundled deploy/ directory; may be empty
  std::string platform;               // the section of platforms: to apply; empty applies none
  DeployFileReader reader = read_deploy_file;
};

// The path a --deploy-config argument names: the path itself (made absolute) when `reader` can
// read it, else (for a bare file name) the file of that name in `bundled_dir`. Throws kNotFound
// naming what was tried.
std::filesystem::path resolve_deploy_path(const std::string& argument, const std::filesystem::path& bundled_dir,
                                          const DeployFileReader& reader = read_deploy_file);

// Loads the deploy YAML at `path` (absolute or relative to the working directory).
DeployConfig load_deploy_config(const std::filesystem::path& path, const DeployLoadOptions& options);

// Parses deploy YAML `text` as if it were the file `path` (base_config resolves next to it).
DeployConfig parse_deploy_config(std::string_view text, const std::filesystem::path& path,
                                 const DeployLoadOptions& options);

}  // namespace omni::config
