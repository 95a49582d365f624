// The runtime's description of a pipeline: one StageSpec per stage, the part of the merged
// per-stage configuration that processes, routing and connectors need. The config layer's merged
// stage config (PipelineConfig + deploy YAML + CLI) is converted into this at serve time.
//
// These are plain values, copied freely; validate_pipeline() checks the invariants the
// orchestrator relies on. The JSON form travels to a stage worker on its command line.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"
#include "model/model_facts.h"

namespace omni::runtime {

inline constexpr std::string_view kDefaultConnectorName = "SharedMemoryConnector";

// One entry of the deploy YAML's top-level `connectors:` (the spec's connector schema).
struct ConnectorSpec {
  std::string name{kDefaultConnectorName};  // a registered connector (connector.h)
  Json extra = Json::object();              // forwarded to the connector
};

struct StageSpec {
  int stage_id = 0;
  // Stages whose outputs feed this one; empty for the entry stage.
  std::vector<int> input_sources;
  // Whether this stage's output can be the client-visible result, and of which modality.
  bool final_output = false;
  std::string final_output_type = "text";
  // The connector of each incoming edge, by source stage id; an edge not listed uses
  // SharedMemoryConnector with no extra options (as vLLM-Omni fills in missing edges).
  std::map<int, ConnectorSpec> input_connectors;
  // async_chunk: the stage starts on its source's first output and receives the rest as it is
  // produced; otherwise it starts once all its sources finished (full-payload mode). Meaningless
  // (and ignored) on the entry stage, so a pipeline-wide async_chunk can be set on every stage.
  bool async_chunk = false;
  // The stage's devices: indices into the launcher's CUDA_VISIBLE_DEVICES (device_assignment.h).
  std::string devices;
  int num_replicas = 1;
  // What the stage runner is built from; "runner" names the runner kind (stage_runner.h),
  // "stage_model" the stage model it runs (model/stage_model_registry.h).
  Json engine_args = Json::object();
  // Deploy defaults under a request's sampling parameters; the pipeline's constraints over both.
  Json default_sampling_params = Json::object();
  Json sampling_constraints = Json::object();
};

struct PipelineSpec {
  std::vector<StageSpec> stages;  // index == stage_id
  // What the served checkpoint tells the API (voices, task types, sample rate): the merged
  // describe() of the stages' models (pipeline_from_config.h). Stays in the head process: it is
  // for the server, not for the stages.
  model::ModelFacts model_facts;
};

// Throws omni::Error(kInvalidConfig) naming the stage and field when: stage ids are not 0..N-1 in
// order, an input source is unknown, not an earlier stage, or repeated, there is not exactly one
// entry stage, no stage has final_output, num_replicas < 1, an async_chunk stage has several input
// sources, an input connector names a stage that
// is not an input source, or engine_args/sampling fields are not JSON objects.
void validate_pipeline(const PipelineSpec& pipeline);

// The connector of the edge from `from_stage` into `to`.
ConnectorSpec edge_connector(const StageSpec& to, int from_stage);

Json to_json(const ConnectorSpec& connector);
ConnectorSpec connector_spec_from_json(const Json& json, std::string_view source);
Json to_json(const StageSpec& stage);
// `source` names where the JSON came from, for error messages; kInvalidConfig on a bad field.
StageSpec stage_spec_from_json(const Json& json, std::string_view source);

}  // namespace omni::runtime
