// The effective per-stage configuration: a registered pipeline, its deploy config and the command
// line merged with the precedence of the spec, each value remembering the layer that set it.
//
// Precedence, highest first: --stage-overrides > explicit global CLI flags > platforms.<p> >
// overlay YAML > base YAML > pipeline-implied values > engine defaults. Within the deploy layers,
// vLLM-Omni's merge order holds: pipeline-wide top-level fields, then the stage's typed fields,
// then its engine_extras (extras win).
//
// build_effective_config validates everything before anything starts (wiring, devices, async
// chunk mode, overrides) and throws omni::Error naming the stage, field, file or flag at fault.
// It reads files (config.json, deploy YAMLs) but starts nothing; it is reentrant.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/json.h"
#include "config/deploy_loader.h"
#include "config/deploy_schema.h"
#include "config/pipeline_config.h"
#include "config/pipeline_registry.h"
#include "config/provenance.h"

namespace omni::config {

// What the command line contributes. Only flags the user typed belong here, never parser
// defaults, so that a default can never override a YAML value.
struct CliConfigInputs {
  std::string model;
  std::string deploy_config;                        // --deploy-config as given; empty = the pipeline's bundled default
  OrderedJson engine_args = OrderedJson::object();  // engine field -> value, applied to every stage
  std::map<std::string, std::string> flag_names;    // engine field -> the flag that set it, for messages
  std::optional<bool> async_chunk;                  // --async-chunk / --no-async-chunk
  std::string stage_overrides;                      // --stage-overrides JSON text; empty = none
};

struct ConfigEnvironment {
  std::filesystem::path bundled_deploy_dir;
  std::string platform;  // cuda, rocm, npu, xpu, musa or cpu (config/platform.h)
  DeployFileReader reader = read_deploy_file;
};

struct EffectiveStage {
  const StagePipelineConfig* topology = nullptr;  // owned by the registry
  std::optional<std::string> devices;
  int64_t num_replicas = 1;
  OrderedJson env = OrderedJson::object();
  bool async_chunk = false;
  OrderedJson engine_args = OrderedJson::object();    // every effective engine argument, extras included
  OrderedJson engine_extras = OrderedJson::object();  // the deploy's extras for this stage
  OrderedJson default_sampling_params = OrderedJson::object();
  OrderedJson default_pooling_params = OrderedJson::object();
  std::map<std::string, std::string> input_connectors;   // from_stage_<n> -> connector name
  std::map<std::string, std::string> output_connectors;  // to_stage_<n> -> connector name
  SourceMap sources;  // engine arg / placement / "default_sampling_params.<k>" -> layer
};

struct EffectiveConfig {
  std::string model;
  const PipelineConfig* pipeline = nullptr;  // owned by the registry
  std::string pipeline_reason;               // how the model was matched to the pipeline
  std::string platform;
  std::vector<std::string> deploy_files;  // base first; empty when no deploy config applies
  bool async_chunk = false;
  Provenance async_chunk_source;
  std::string session_mode = "turn";
  std::map<std::string, ConnectorSpec> connectors;  // includes the automatic SharedMemoryConnector
  SourceMap connector_sources;                      // connector name -> layer
  std::vector<EffectiveStage> stages;               // in pipeline order
};

// Name of the connector added for edges the deploy config does not wire.
inline constexpr const char* kAutoConnectorName = "shared_memory";

// Engine defaults: the lowest layer, for fields every engine reads.
const OrderedJson& engine_defaults();

EffectiveConfig build_effective_config(const PipelineRegistry& registry, const CliConfigInputs& cli,
                                       const ConfigEnvironment& environment);

}  // namespace omni::config
