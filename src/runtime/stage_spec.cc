#include "runtime/stage_spec.h"

#include <set>

#include "base/error.h"
#include "runtime/engine_args.h"

namespace omni::runtime {

namespace {

// Reads an optional field, turning nlohmann's type errors into one that names the field.
template <typename T>
void read_field(const Json& json, const char* field, T& out, std::string_view source) {
  std::optional<T> value = optional_field<T>(json, field, [&](const Json& wrong) {
    throw_error(ErrorCode::kInvalidConfig, "{}: field '{}' has the wrong type ({})", source, field, wrong.type_name());
  });
  if (value) out = std::move(*value);
}

void read_object(const Json& json, const char* field, Json& out, std::string_view source) {
  auto it = json.find(field);
  if (it == json.end() || it->is_null()) return;
  if (!it->is_object()) {
    throw_error(ErrorCode::kInvalidConfig, "{}: field '{}' must be a JSON object, not {}", source, field,
                it->type_name());
  }
  out = *it;
}

}  // namespace

void validate_pipeline(const PipelineSpec& pipeline) {
  if (pipeline.stages.empty()) throw_error(ErrorCode::kInvalidConfig, "pipeline has no stages");
  int entry_stages = 0;
  bool any_final = false;
  for (size_t i = 0; i < pipeline.stages.size(); ++i) {
    const StageSpec& stage = pipeline.stages[i];
    if (stage.stage_id != static_cast<int>(i)) {
      throw_error(ErrorCode::kInvalidConfig, "stage ids must be 0..{} in order; position {} holds stage {}",
                  pipeline.stages.size() - 1, i, stage.stage_id);
    }
    std::set<int> seen;
    for (int source : stage.input_sources) {
      if (source < 0 || source >= stage.stage_id) {
        throw_error(ErrorCode::kInvalidConfig, "stage {}: input_sources lists stage {}, which is not an earlier stage",
                    stage.stage_id, source);
      }
      if (!seen.insert(source).second) {
        throw_error(ErrorCode::kInvalidConfig, "stage {}: input_sources lists stage {} twice", stage.stage_id, source);
      }
    }
    for (const auto& [from, connector] : stage.input_connectors) {
      if (!seen.count(from)) {
        throw_error(ErrorCode::kInvalidConfig,
                    "stage {}: input_connectors has from_stage_{}, which is not in input_sources", stage.stage_id,
                    from);
      }
    }
    if (stage.async_chunk && stage.input_sources.size() > 1) {
      throw_error(ErrorCode::kInvalidConfig, "stage {}: async_chunk needs a single input source, has {}",
                  stage.stage_id, stage.input_sources.size());
    }
    if (stage.input_sources.empty()) ++entry_stages;
    any_final = any_final || stage.final_output;
    if (stage.num_replicas < 1) {
      throw_error(ErrorCode::kInvalidConfig, "stage {}: num_replicas must be at least 1, not {}", stage.stage_id,
                  stage.num_replicas);
    }
    for (const auto& [field, value] : {std::pair<const char*, const Json*>{"engine_args", &stage.engine_args},
                                       {"default_sampling_params", &stage.default_sampling_params},
                                       {"sampling_constraints", &stage.sampling_constraints}}) {
      if (!value->is_object()) {
        throw_error(ErrorCode::kInvalidConfig, "stage {}: {} must be a JSON object", stage.stage_id, field);
      }
    }
  }
  if (entry_stages != 1) {
    throw_error(ErrorCode::kInvalidConfig, "pipeline must have exactly one entry stage (empty input_sources), has {}",
                entry_stages);
  }
  if (!any_final) throw_error(ErrorCode::kInvalidConfig, "pipeline has no stage with final_output");
}

ConnectorSpec edge_connector(const StageSpec& to, int from_stage) {
  auto it = to.input_connectors.find(from_stage);
  return it == to.input_connectors.end() ? ConnectorSpec{} : it->second;
}

Json to_json(const ConnectorSpec& connector) { return {{"name", connector.name}, {"extra", connector.extra}}; }

ConnectorSpec connector_spec_from_json(const Json& json, std::string_view source) {
  if (!json.is_object()) throw_error(ErrorCode::kInvalidConfig, "{}: a connector must be a JSON object", source);
  ConnectorSpec connector;
  read_field(json, "name", connector.name, source);
  read_object(json, "extra", connector.extra, source);
  return connector;
}

Json to_json(const StageSpec& stage) {
  Json connectors = Json::object();
  for (const auto& [from, connector] : stage.input_connectors) {
    connectors["from_stage_" + std::to_string(from)] = to_json(connector);
  }
  return {{"stage_id", stage.stage_id},
          {"input_sources", stage.input_sources},
          {"final_output", stage.final_output},
          {"final_output_type", stage.final_output_type},
          {"input_connectors", connectors},
          {"async_chunk", stage.async_chunk},
          {"devices", stage.devices},
          {"num_replicas", stage.num_replicas},
          {"engine_args", stage.engine_args},
          {"default_sampling_params", stage.default_sampling_params},
          {"sampling_constraints", stage.sampling_constraints}};
}

StageSpec stage_spec_from_json(const Json& json, std::string_view source) {
  if (!json.is_object()) throw_error(ErrorCode::kInvalidConfig, "{}: a stage must be a JSON object", source);
  StageSpec stage;
  read_field(json, "stage_id", stage.stage_id, source);
  read_field(json, "input_sources", stage.input_sources, source);
  read_field(json, "final_output", stage.final_output, source);
  read_field(json, "final_output_type", stage.final_output_type, source);
  read_field(json, "async_chunk", stage.async_chunk, source);
  read_field(json, "devices", stage.devices, source);
  read_field(json, "num_replicas", stage.num_replicas, source);
  read_object(json, "engine_args", stage.engine_args, source);
  read_object(json, "default_sampling_params", stage.default_sampling_params, source);
  read_object(json, "sampling_constraints", stage.sampling_constraints, source);
  Json connectors = Json::object();
  read_object(json, "input_connectors", connectors, source);
  for (const auto& [name, value] : connectors.items()) {
    constexpr std::string_view kPrefix = "from_stage_";
    int from = -1;
    if (name.rfind(kPrefix, 0) == 0) {
      try {
        size_t used = 0;
        from = std::stoi(name.substr(kPrefix.size()), &used);
        if (used != name.size() - kPrefix.size()) from = -1;
      } catch (const std::exception&) {
        from = -1;
      }
    }
    if (from < 0) {
      throw_error(ErrorCode::kInvalidConfig, "{}: input_connectors key '{}' must be from_stage_<id>", source, name);
    }
    stage.input_connectors[from] =
        connector_spec_from_json(value, fmt::format("{}: input_connectors.{}", source, name));
  }
  return stage;
}

}  // namespace omni::runtime
