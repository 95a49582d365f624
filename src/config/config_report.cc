#include "config/config_report.h"

#include <fmt/format.h>

#include "config/json_merge.h"

namespace omni::config {

namespace {

OrderedJson connector_json(const ConnectorSpec& spec) { return {{"name", spec.name}, {"extra", spec.extra}}; }

OrderedJson string_map_json(const std::map<std::string, std::string>& map) {
  OrderedJson out = OrderedJson::object();
  for (const auto& [key, value] : map) out[key] = value;
  return out;
}

std::string source_text(const SourceMap& sources, const std::string& key, bool explain) {
  if (!explain) return "";
  auto it = sources.find(key);
  return it == sources.end() ? "" : "  <- " + it->second.explain();
}

}  // namespace

OrderedJson effective_config_json(const EffectiveConfig& config) {
  OrderedJson out = OrderedJson::object();
  out["pipeline"] = config.pipeline->model_type;
  out["model"] = config.model;
  out["platform"] = config.platform;
  out["deploy_files"] = config.deploy_files;
  out["async_chunk"] = config.async_chunk;
  out["session_mode"] = config.session_mode;
  OrderedJson connectors = OrderedJson::object();
  for (const auto& [name, spec] : config.connectors) connectors[name] = connector_json(spec);
  out["connectors"] = connectors;
  OrderedJson stages = OrderedJson::array();
  for (const auto& stage : config.stages) {
    const StagePipelineConfig& topology = *stage.topology;
    OrderedJson entry = OrderedJson::object();
    entry["stage_id"] = topology.stage_id;
    entry["model_stage"] = topology.model_stage;
    entry["execution_type"] = execution_type_name(topology.execution_type);
    entry["input_sources"] = topology.input_sources;
    entry["final_output"] = topology.final_output;
    entry["final_output_type"] =
        topology.final_output_type.empty() ? OrderedJson(nullptr) : OrderedJson(topology.final_output_type);
    entry["devices"] = stage.devices ? OrderedJson(*stage.devices) : OrderedJson(nullptr);
    entry["num_replicas"] = stage.num_replicas;
    entry["env"] = stage.env;
    entry["engine_args"] = stage.engine_args;
    entry["engine_extras"] = stage.engine_extras;
    entry["default_sampling_params"] = stage.default_sampling_params;
    entry["default_pooling_params"] = stage.default_pooling_params;
    entry["input_connectors"] = string_map_json(stage.input_connectors);
    entry["output_connectors"] = string_map_json(stage.output_connectors);
    OrderedJson sources = OrderedJson::object();
    for (const auto& [key, source] : stage.sources) sources[key] = source.label();
    entry["sources"] = sources;
    stages.push_back(entry);
  }
  out["stages"] = stages;
  return out;
}

std::string effective_config_table(const EffectiveConfig& config, bool explain) {
  std::string out;
  auto line = [&](std::string_view key, const std::string& value, const std::string& source) {
    out += fmt::format("  {:<34} {}{}\n", key, value, source);
  };
  out += fmt::format("pipeline     {}  ({})\n", config.pipeline->model_type, config.pipeline_reason);
  out += fmt::format("model        {}\n", config.model);
  out += fmt::format("platform     {}\n", config.platform);
  out +=
      fmt::format("deploy       {}\n",
                  config.deploy_files.empty() ? "(none)" : fmt::format("{}", fmt::join(config.deploy_files, " <- ")));
  out += fmt::format("async_chunk  {}{}\n", config.async_chunk,
                     explain ? "  <- " + config.async_chunk_source.explain() : "");
  out += "connectors\n";
  for (const auto& [name, spec] : config.connectors) {
    auto source = config.connector_sources.find(name);
    out += fmt::format("  {:<34} {} {}{}\n", name, spec.name, json_text(spec.extra),
                       explain && source != config.connector_sources.end() ? "  <- " + source->second.explain() : "");
  }
  for (const auto& stage : config.stages) {
    const StagePipelineConfig& topology = *stage.topology;
    out += fmt::format("\nstage {}  {}  {}", topology.stage_id, topology.model_stage,
                       execution_type_name(topology.execution_type));
    if (!topology.input_sources.empty()) out += fmt::format("  inputs {}", fmt::join(topology.input_sources, ","));
    if (topology.final_output) out += fmt::format("  final output: {}", topology.final_output_type);
    out += "\n";
    line("devices", stage.devices ? *stage.devices : "(unset)", source_text(stage.sources, "devices", explain));
    line("num_replicas", std::to_string(stage.num_replicas), source_text(stage.sources, "num_replicas", explain));
    for (const auto& [key, value] : stage.env.items()) {
      line("env." + key, json_text(value), source_text(stage.sources, "env." + key, explain));
    }
    for (const auto& [key, value] : stage.engine_args.items()) {
      line(key, json_text(value), source_text(stage.sources, key, explain));
    }
    for (const auto& [key, value] : stage.default_sampling_params.items()) {
      line("default_sampling_params." + key, json_text(value),
           source_text(stage.sources, "default_sampling_params." + key, explain));
    }
    for (const auto& [key, value] : stage.default_pooling_params.items()) {
      line("default_pooling_params." + key, json_text(value),
           source_text(stage.sources, "default_pooling_params." + key, explain));
    }
    for (const auto& [edge, connector] : stage.input_connectors) {
      line("input_connectors." + edge, connector, source_text(stage.sources, "input_connectors." + edge, explain));
    }
    for (const auto& [edge, connector] : stage.output_connectors) {
      line("output_connectors." + edge, connector, source_text(stage.sources, "output_connectors." + edge, explain));
    }
  }
  return out;
}

}  // namespace omni::config
