// Rendering an EffectiveConfig for `omnistage config`: one JSON object, or a table for people.
#pragma once

#include <string>

#include "base/json.h"
#include "config/effective_config.h"

namespace omni::config {

// {"pipeline", "model", "platform", "deploy_files", "async_chunk", "connectors", "stages": [{
//   "stage_id", "model_stage", "execution_type", "input_sources", "final_output", "final_output_type",
//   "devices", "num_replicas", "env", "engine_args", "engine_extras", "default_sampling_params",
//   "default_pooling_params", "input_connectors", "output_connectors", "sources"}]}
// `sources` maps each field to its layer label (Provenance::label).
OrderedJson effective_config_json(const EffectiveConfig& config);

// A readable table per stage; with `explain`, each value is followed by the layer and the file or
// flag that set it.
std::string effective_config_table(const EffectiveConfig& config, bool explain);

}  // namespace omni::config
