#include "runtime/pipeline_from_config.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/error.h"
#include "model/stage_model_registry.h"
#include "runtime/ar_stage_runner.h"
#include "runtime/diffusion_stage_runner.h"
#include "runtime/generation_stage_runner.h"
#include "runtime/shm_connector.h"
#include "runtime/stage_runner.h"

namespace omni::runtime {

namespace {

Json plain(const OrderedJson& value) { return Json::parse(value.dump()); }

// A connector as the deploy YAML defines it: vLLM-Omni's `extra` mixes the transport's own
// options with those of the stages it connects (the chunk sizes of a decoder, connector_get_max_wait…).
// `transport` gets only the options its implementation reads (all of them for a connector whose
// options are not listed); the consumer stage gets the whole `extra` as connector_extra.
struct ResolvedConnector {
  ConnectorSpec transport;
  Json extra;
};

ResolvedConnector resolve_connector(const config::EffectiveConfig& config, int stage_id, const std::string& name) {
  auto it = config.connectors.find(name);
  if (it == config.connectors.end()) {
    throw_error(ErrorCode::kInvalidConfig, "stage {}: connector '{}' is not defined under connectors:", stage_id, name);
  }
  ResolvedConnector resolved;
  resolved.transport.name = it->second.name.empty() ? std::string(kDefaultConnectorName) : it->second.name;
  resolved.extra = plain(it->second.extra);
  resolved.transport.extra = resolved.extra;
  if (resolved.transport.name == kSharedMemoryConnectorName && resolved.extra.is_object()) {
    resolved.transport.extra = Json::object();
    for (std::string_view option : kSharedMemoryConnectorOptions) {
      auto value = resolved.extra.find(std::string(option));
      if (value != resolved.extra.end()) resolved.transport.extra[std::string(option)] = *value;
    }
  }
  return resolved;
}

bool runner_registered(std::string_view kind) {
  const std::vector<std::string> kinds = stage_runner_kinds();
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

// The runner of each execution type's engine.
std::string_view engine_runner_kind(config::ExecutionType type) {
  switch (type) {
    case config::ExecutionType::kLlmAr:
      return kArRunnerKind;
    case config::ExecutionType::kLlmGeneration:
      return kGenerationRunnerKind;
    case config::ExecutionType::kDiffusion:
      return kDiffusionRunnerKind;
  }
  return {};
}

// The runner kind that serves a stage: the engine runner of its execution type over the stage
// model the pipeline names, or a runner registered under the stage model's own name (a stage
// model that does not run on its execution type's engine yet). Empty when there is none.
std::string find_runner_kind(const config::StagePipelineConfig& topology) {
  const config::ExecutionType type = topology.execution_type;
  const model::StageModels& models = model::builtin_stage_models();
  if (!topology.stage_model.empty()) {
    if (runner_registered(topology.stage_model)) return topology.stage_model;
    if (models.has(type, topology.stage_model) && !engine_runner_kind(type).empty()) {
      return std::string(engine_runner_kind(type));
    }
  }
  return {};
}

// find_runner_kind, or the error that names the stage that cannot be served.
std::string runner_kind(const config::EffectiveConfig& config, const config::StagePipelineConfig& topology) {
  if (std::string kind = find_runner_kind(topology); !kind.empty()) return kind;
  const config::ExecutionType type = topology.execution_type;
  const std::vector<std::string> registered = model::builtin_stage_models().names(type);
  throw_error(ErrorCode::kUnsupported,
              "pipeline '{}' is configured and valid, but it cannot be served yet: stage {} ('{}', {}) has no stage "
              "model in omnistage ({}; {} stage models built in: {}). `omnistage config {}` prints the effective "
              "configuration.",
              config.pipeline->model_type, topology.stage_id, topology.model_stage, config::execution_type_name(type),
              topology.stage_model.empty() ? std::string("the pipeline names none")
                                           : fmt::format("stage model '{}' is not registered", topology.stage_model),
              config::execution_type_name(type),
              registered.empty() ? std::string("none") : fmt::format("{}", fmt::join(registered, ", ")), config.model);
}

}  // namespace

ServableStages servable_stages(const config::EffectiveConfig& config) {
  ServableStages out{config, {}};
  size_t first_missing = config.stages.size();
  for (size_t i = 0; i < config.stages.size(); ++i) {
    if (find_runner_kind(*config.stages[i].topology).empty()) {
      first_missing = i;
      break;
    }
  }
  if (first_missing == config.stages.size()) return out;
  // The stages before it must end in a final output of their own, and none may read a later stage.
  bool has_final = false;
  for (size_t i = 0; i < first_missing; ++i) {
    const config::StagePipelineConfig& topology = *config.stages[i].topology;
    has_final = has_final || topology.final_output;
    for (int source : topology.input_sources) {
      if (source < 0 || static_cast<size_t>(source) >= first_missing) return out;
    }
  }
  if (!has_final) return out;
  for (size_t i = first_missing; i < config.stages.size(); ++i) out.left_out.push_back(config.stages[i].topology);
  out.config.stages.resize(first_missing);
  for (config::EffectiveStage& stage : out.config.stages) {
    for (auto it = stage.output_connectors.begin(); it != stage.output_connectors.end();) {
      const int to = std::stoi(it->first.substr(it->first.rfind('_') + 1));
      it = static_cast<size_t>(to) >= first_missing ? stage.output_connectors.erase(it) : std::next(it);
    }
  }
  return out;
}

PipelineSpec pipeline_spec_from_config(const config::EffectiveConfig& config) {
  PipelineSpec pipeline;
  for (const config::EffectiveStage& stage : config.stages) {
    const config::StagePipelineConfig& topology = *stage.topology;
    StageSpec spec;
    spec.stage_id = topology.stage_id;
    spec.input_sources = topology.input_sources;
    spec.final_output = topology.final_output;
    if (!topology.final_output_type.empty()) spec.final_output_type = topology.final_output_type;
    spec.async_chunk = stage.async_chunk;
    spec.devices = stage.devices.value_or("");
    spec.num_replicas = static_cast<int>(stage.num_replicas);
    spec.engine_args = plain(stage.engine_args);
    spec.engine_args["model"] = config.model;
    spec.engine_args["runner"] = runner_kind(config, topology);
    spec.engine_args["stage_model"] = topology.stage_model;
    spec.default_sampling_params = plain(stage.default_sampling_params);
    spec.sampling_constraints = topology.sampling_constraints;
    // A decoding stage reads its chunking options (model/audio_chunking.h) from the extra of the
    // connectors that feed it.
    Json connector_extra = Json::object();
    auto add_connector = [&](int source, const std::string& name) {
      ResolvedConnector connector = resolve_connector(config, spec.stage_id, name);
      if (connector.extra.is_object()) {
        for (const auto& [key, value] : connector.extra.items()) connector_extra[key] = value;
      }
      spec.input_connectors[source] = std::move(connector.transport);
    };
    for (int source : topology.input_sources) {
      auto in = stage.input_connectors.find(fmt::format("from_stage_{}", source));
      if (in != stage.input_connectors.end()) {
        add_connector(source, in->second);
        continue;
      }
      if (source < 0 || static_cast<size_t>(source) >= config.stages.size()) continue;  // validate_pipeline names it
      const auto& producer_outputs = config.stages[static_cast<size_t>(source)].output_connectors;
      auto out = producer_outputs.find(fmt::format("to_stage_{}", spec.stage_id));
      if (out != producer_outputs.end()) add_connector(source, out->second);
    }
    if (!connector_extra.empty()) spec.engine_args["connector_extra"] = std::move(connector_extra);
    pipeline.stages.push_back(std::move(spec));
    if (model::builtin_stage_models().has(topology.execution_type, topology.stage_model)) {
      pipeline.model_facts.merge(
          model::builtin_stage_models().describe(topology.execution_type, topology.stage_model, config.model));
    }
  }
  return pipeline;
}

}  // namespace omni::runtime
