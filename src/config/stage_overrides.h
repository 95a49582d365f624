// --stage-overrides: per-stage settings from the command line, the highest-precedence layer.
#pragma once

#include <map>
#include <string_view>

#include "base/json.h"
#include "config/pipeline_config.h"

namespace omni::config {

// Parses `text`, e.g. '{"0": {"gpu_memory_utilization": 0.8}, "2": {"enforce_eager": true}}', into
// stage id -> settings. Every key must be the id of a stage of `pipeline`, every value a mapping;
// typed fields are type-checked. Throws omni::Error(kInvalidArgument) naming --stage-overrides and
// the line/column of a JSON syntax error, the unknown stage (with the pipeline's stage ids) or
// the bad field.
std::map<int, OrderedJson> parse_stage_overrides(std::string_view text, const PipelineConfig& pipeline);

}  // namespace omni::config
