// YAML helpers on yaml-cpp: loading with errors that carry file and line, and conversion to
// JSON so that merged configuration can be handled as one kind of tree.
#pragma once

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <string_view>

#include "base/json.h"

namespace omni {

// Loads a YAML file. A missing file is kNotFound; a syntax error is kInvalidConfig with
// "file:line:column: message" (1-based line and column).
YAML::Node load_yaml_file(const std::filesystem::path& path);

// Parses YAML text; errors name `source` as the file.
YAML::Node parse_yaml(std::string_view text, std::string_view source);

// Converts a YAML tree to JSON. Plain scalars become null/bool/int/float where YAML 1.2's core
// schema says so (null, ~, true/false, integers, floats); quoted scalars stay strings.
Json yaml_to_json(const YAML::Node& node);

}  // namespace omni
