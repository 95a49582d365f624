#include "config/effective_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <system_error>

#include "base/error.h"
#include "config/json_merge.h"
#include "config/stage_overrides.h"

namespace omni::config {

namespace fs = std::filesystem;

const OrderedJson& engine_defaults() {
  static const OrderedJson kDefaults = {
      {"tensor_parallel_size", 1}, {"pipeline_parallel_size", 1},
      {"data_parallel_size", 1},   {"gpu_memory_utilization", 0.9},
      {"dtype", "auto"},           {"seed", 0},
      {"enforce_eager", false},    {"trust_remote_code", false},
  };
  return kDefaults;
}

namespace {

const Provenance kDefaultSource{Layer::kDefault, "", ""};
const Provenance kPipelineSource{Layer::kPipeline, "", ""};
const Provenance kStageOverrideSource{Layer::kStageOverride, "", ""};

Provenance source_of(const SourceMap& sources, const std::string& key) {
  auto it = sources.find(key);
  return it == sources.end() ? kDefaultSource : it->second;
}

// Writes one engine argument and remembers who wrote it.
void set_arg(EffectiveStage& stage, const std::string& key, const OrderedJson& value, const Provenance& source) {
  stage.engine_args[key] = value;
  stage.sources[key] = source;
}

// --model-class-name: the diffusers pipeline class that replaces model_index.json's.
std::string model_class_name(const CliConfigInputs& cli) {
  auto it = cli.engine_args.find("model_class_name");
  return it != cli.engine_args.end() && it->is_string() ? it->get<std::string>() : "";
}

DeployConfig load_deploy(const PipelineRegistry& registry, const CliConfigInputs& cli,
                         const ConfigEnvironment& environment, PipelineResolution& resolution) {
  DeployLoadOptions options{environment.bundled_deploy_dir, environment.platform, environment.reader};
  if (!cli.deploy_config.empty()) {
    DeployConfig deploy = load_deploy_config(
        resolve_deploy_path(cli.deploy_config, environment.bundled_deploy_dir, environment.reader), options);
    resolution = resolve_pipeline(registry, cli.model, deploy.pipeline, model_class_name(cli));
    return deploy;
  }
  resolution = resolve_pipeline(registry, cli.model, "", model_class_name(cli));
  const std::string& name = resolution.pipeline->default_deploy_config_name;
  if (name.empty()) return DeployConfig{};
  fs::path bundled = environment.bundled_deploy_dir / name;
  std::error_code ec;
  if (environment.bundled_deploy_dir.empty() || !fs::exists(bundled, ec)) {
    throw_error(
        ErrorCode::kNotFound,
        "the bundled deploy config '{}' of pipeline '{}' is not in the deploy dir '{}' (set OMNISTAGE_DEPLOY_DIR "
        "or pass --deploy-config)",
        name, resolution.pipeline->model_type, environment.bundled_deploy_dir.string());
  }
  return load_deploy_config(bundled, options);
}

std::vector<std::pair<int, int>> pipeline_edges(const PipelineConfig& pipeline, const DeployConfig& deploy) {
  std::vector<std::pair<int, int>> edges = deploy.edges;
  if (edges.empty()) {
    for (const auto& stage : pipeline.stages) {
      for (int source : stage.input_sources) edges.emplace_back(source, stage.stage_id);
    }
  }
  for (const auto& [from, to] : edges) {
    if (!pipeline.find_stage(from) || !pipeline.find_stage(to)) {
      throw_error(ErrorCode::kInvalidConfig, "{}: edge {} -> {} names a stage that pipeline '{}' does not have",
                  source_of(deploy.sources, "edges").file, from, to, pipeline.model_type);
    }
  }
  return edges;
}

void resolve_async_chunk(EffectiveConfig& out, const DeployConfig& deploy, const CliConfigInputs& cli,
                         const std::vector<std::pair<int, int>>& edges) {
  out.async_chunk = deploy.async_chunk;
  out.async_chunk_source = source_of(deploy.sources, "async_chunk");
  if (cli.async_chunk) {
    out.async_chunk = *cli.async_chunk;
    out.async_chunk_source = Provenance{Layer::kCli, "", *cli.async_chunk ? "--async-chunk" : "--no-async-chunk"};
  }
  const PipelineConfig& pipeline = *out.pipeline;
  if (pipeline.stages.size() <= 1 && out.async_chunk) {
    out.async_chunk = false;
    out.async_chunk_source = kPipelineSource;
  }
  if (!out.async_chunk || edges.empty()) return;
  const bool has_producer = std::any_of(pipeline.stages.begin(), pipeline.stages.end(),
                                        [](const StagePipelineConfig& s) { return s.produces_async_chunks; });
  if (!has_producer) {
    throw_error(ErrorCode::kInvalidConfig,
                "async_chunk is on (set by {}) but no stage of pipeline '{}' produces async chunks; set `async_chunk: "
                "false` in the deploy config or pass --no-async-chunk",
                out.async_chunk_source.explain(), pipeline.model_type);
  }
}

void check_async_edges(const EffectiveConfig& out, const std::vector<std::pair<int, int>>& edges) {
  for (const auto& [from, to] : edges) {
    const EffectiveStage* producer = nullptr;
    const EffectiveStage* consumer = nullptr;
    for (const auto& stage : out.stages) {
      if (stage.topology->stage_id == from) producer = &stage;
      if (stage.topology->stage_id == to) consumer = &stage;
    }
    if (!producer->topology->produces_async_chunks) continue;
    if (producer->async_chunk != consumer->async_chunk) {
      throw_error(ErrorCode::kInvalidConfig,
                  "pipeline '{}': stages {} and {} disagree on async_chunk ({} vs {}) on their connector edge; set the "
                  "same async_chunk on both stages",
                  out.pipeline->model_type, from, to, producer->async_chunk, consumer->async_chunk);
    }
  }
}

// Sampling constraints win over deploy defaults; stop_token_ids is the union, deploy order first.
void apply_sampling_constraints(EffectiveStage& stage) {
  for (const auto& [key, value] : stage.topology->sampling_constraints.items()) {
    OrderedJson merged = OrderedJson(value);
    if (key == "stop_token_ids" && value.is_array()) {
      merged = OrderedJson::array();
      auto add = [&](const OrderedJson& id) {
        if (std::find(merged.begin(), merged.end(), id) == merged.end()) merged.push_back(id);
      };
      if (auto it = stage.default_sampling_params.find(key);
          it != stage.default_sampling_params.end() && it->is_array()) {
        for (const auto& id : *it) add(id);
      }
      for (const auto& id : value) add(OrderedJson(id));
    }
    stage.default_sampling_params[key] = merged;
    stage.sources["default_sampling_params." + key] = kPipelineSource;
  }
}

void copy_prefixed_sources(SourceMap& to, const SourceMap& from, const std::string& key) {
  const std::string prefix = key + ".";
  for (const auto& [name, source] : from) {
    if (name == key || name.rfind(prefix, 0) == 0) to[name] = source;
  }
}

void apply_stage_override(EffectiveStage& stage, const OrderedJson& settings) {
  for (const auto& [key, value] : settings.items()) {
    if (key == "devices") {
      stage.devices = value.is_string() ? value.get<std::string>() : std::to_string(value.get<int64_t>());
      stage.sources["devices"] = kStageOverrideSource;
    } else if (key == "num_replicas") {
      stage.num_replicas = value.get<int64_t>();
      stage.sources["num_replicas"] = kStageOverrideSource;
    } else if (key == "env") {
      for (const auto& [name, setting] : value.items()) {
        stage.env[name] = setting;
        stage.sources["env." + name] = kStageOverrideSource;
      }
    } else if (key == "default_sampling_params" || key == "default_pooling_params") {
      OrderedJson& target =
          key == "default_sampling_params" ? stage.default_sampling_params : stage.default_pooling_params;
      deep_merge(target, value);
      for (const auto& [name, unused] : value.items()) stage.sources[key + "." + name] = kStageOverrideSource;
    } else {
      auto existing = stage.engine_args.find(key);
      if (existing != stage.engine_args.end() && existing->is_object() && value.is_object()) {
        deep_merge(*existing, value);
        stage.sources[key] = kStageOverrideSource;
      } else {
        set_arg(stage, key, value, kStageOverrideSource);
      }
    }
  }
}

std::string stage_label(const EffectiveStage& stage) {
  return fmt::format("stage {} ({})", stage.topology->stage_id, stage.topology->model_stage);
}

void check_connectors(EffectiveConfig& out, const std::vector<std::pair<int, int>>& edges) {
  auto check_names = [&](const EffectiveStage& stage, const std::map<std::string, std::string>& wiring,
                         const char* field, const char* prefix) {
    for (const auto& [edge, connector] : wiring) {
      if (!out.connectors.contains(connector)) {
        std::vector<std::string> defined;
        for (const auto& [name, unused] : out.connectors) defined.push_back(name);
        throw_error(ErrorCode::kInvalidConfig,
                    "{}: {}.{} names connector '{}', which is not defined under connectors: (defined: {})",
                    stage_label(stage), field, edge, connector,
                    defined.empty() ? "none" : fmt::format("{}", fmt::join(defined, ", ")));
      }
      const int peer = std::stoi(edge.substr(std::string_view(prefix).size()));
      const bool is_edge = std::any_of(edges.begin(), edges.end(), [&](const auto& e) {
        return std::string_view(prefix) == "from_stage_" ? (e.first == peer && e.second == stage.topology->stage_id)
                                                         : (e.first == stage.topology->stage_id && e.second == peer);
      });
      if (!is_edge) {
        throw_error(ErrorCode::kInvalidConfig, "{}: {}.{}: pipeline '{}' has no edge {} stage {}", stage_label(stage),
                    field, edge, out.pipeline->model_type,
                    std::string_view(prefix) == "from_stage_" ? "into this stage from" : "from this stage to", peer);
      }
    }
  };
  for (const auto& stage : out.stages) {
    check_names(stage, stage.input_connectors, "input_connectors", "from_stage_");
    check_names(stage, stage.output_connectors, "output_connectors", "to_stage_");
  }

  auto find = [&](int id) -> EffectiveStage& {
    return *std::find_if(out.stages.begin(), out.stages.end(),
                         [&](const EffectiveStage& s) { return s.topology->stage_id == id; });
  };
  for (const auto& [from, to] : edges) {
    EffectiveStage& producer = find(from);
    EffectiveStage& consumer = find(to);
    const std::string out_key = fmt::format("to_stage_{}", to);
    const std::string in_key = fmt::format("from_stage_{}", from);
    auto out_it = producer.output_connectors.find(out_key);
    auto in_it = consumer.input_connectors.find(in_key);
    if (out_it != producer.output_connectors.end() && in_it != consumer.input_connectors.end() &&
        out_it->second != in_it->second) {
      throw_error(ErrorCode::kInvalidConfig,
                  "edge {} -> {} is wired to two connectors: stage {} output_connectors.{} = '{}' but stage {} "
                  "input_connectors.{} = '{}'",
                  from, to, from, out_key, out_it->second, to, in_key, in_it->second);
    }
    std::string connector;
    Provenance source = kDefaultSource;
    if (in_it != consumer.input_connectors.end()) {
      connector = in_it->second;
      source = source_of(consumer.sources, "input_connectors");
    } else if (out_it != producer.output_connectors.end()) {
      connector = out_it->second;
      source = source_of(producer.sources, "output_connectors");
    } else {
      connector = kAutoConnectorName;
      if (!out.connectors.contains(connector)) {
        out.connectors[connector] = ConnectorSpec{std::string(kDefaultConnectorClass), OrderedJson::object()};
        out.connector_sources[connector] = kDefaultSource;
      }
    }
    producer.output_connectors[out_key] = connector;
    consumer.input_connectors[in_key] = connector;
    producer.sources["output_connectors." + out_key] = source;
    consumer.sources["input_connectors." + in_key] = source;
  }
}

int64_t positive_arg(const EffectiveStage& stage, const char* key, int64_t fallback) {
  auto it = stage.engine_args.find(key);
  if (it == stage.engine_args.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > 4096) {
    throw_error(ErrorCode::kInvalidConfig, "{}: {} must be an integer from 1 to 4096, got {} (set by {})",
                stage_label(stage), key, json_text(*it), source_of(stage.sources, key).explain());
  }
  return it->get<int64_t>();
}

void check_devices(const EffectiveStage& stage, const CliConfigInputs& cli) {
  if (!stage.devices) return;
  std::vector<int64_t> devices;
  std::string text = *stage.devices;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty() || item.size() > 6 || item.find_first_not_of("0123456789") != std::string::npos) {
      throw_error(ErrorCode::kInvalidConfig, "{}: devices \"{}\": '{}' is not a device index (set by {})",
                  stage_label(stage), text, item, source_of(stage.sources, "devices").explain());
    }
    const int64_t index = std::stoll(item);
    if (std::find(devices.begin(), devices.end(), index) != devices.end()) {
      throw_error(ErrorCode::kInvalidConfig, "{}: devices \"{}\" lists device {} twice", stage_label(stage), text,
                  index);
    }
    devices.push_back(index);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }

  int64_t per_replica = 0;
  std::string sizes;
  const int64_t tp = positive_arg(stage, "tensor_parallel_size", 1);
  if (stage.topology->execution_type == ExecutionType::kDiffusion) {
    const int64_t cfg = positive_arg(stage, "cfg_parallel_size", 1);
    const int64_t ulysses = positive_arg(stage, "ulysses_degree", 1);
    const int64_t ring = positive_arg(stage, "ring_degree", 1);
    const int64_t allgather = positive_arg(stage, "allgather_degree", 1);
    const int64_t sp = positive_arg(stage, "sequence_parallel_size", allgather > 1 ? allgather : ulysses * ring);
    per_replica = tp * cfg * sp;
    sizes = fmt::format("tensor_parallel_size {} x cfg_parallel_size {} x sequence_parallel_size {}", tp, cfg, sp);
  } else {
    const int64_t pp = positive_arg(stage, "pipeline_parallel_size", 1);
    const bool has_local = stage.engine_args.contains("data_parallel_size_local") &&
                           !stage.engine_args["data_parallel_size_local"].is_null();
    const char* dp_key = has_local ? "data_parallel_size_local" : "data_parallel_size";
    const int64_t dp = positive_arg(stage, dp_key, 1);
    per_replica = tp * dp * pp;
    sizes = fmt::format("tensor_parallel_size {} x {} {} x pipeline_parallel_size {}", tp, dp_key, dp, pp);
  }
  const int64_t count = static_cast<int64_t>(devices.size());
  const int64_t replicas = stage.num_replicas;
  if (count == per_replica) {
    if (replicas > 1) {
      for (int64_t index : devices) {
        if (index >= per_replica) {
          throw_error(ErrorCode::kInvalidConfig,
                      "{}: devices \"{}\" is a template for {} replicas, so its entries must be below {} (the "
                      "local world size); list all {} devices to place the replicas yourself",
                      stage_label(stage), text, replicas, per_replica, replicas * per_replica);
        }
      }
    }
    return;
  }
  if (count == replicas * per_replica) return;

  std::string message =
      replicas > 1
          ? fmt::format(
                "{}: devices \"{}\" ({} devices) fit neither a template of {} nor a pool of {} ({} replicas) "
                "devices; local world size {} = {}",
                stage_label(stage), text, count, per_replica, replicas * per_replica, replicas, per_replica, sizes)
          : fmt::format("{}: devices \"{}\" ({} device{}) must match the local world size {} = {}", stage_label(stage),
                        text, count, count == 1 ? "" : "s", per_replica, sizes);
  for (const char* key : {"tensor_parallel_size", "pipeline_parallel_size"}) {
    const Provenance source = source_of(stage.sources, key);
    if (source.layer != Layer::kCli || positive_arg(stage, key, 1) == 1) continue;
    const int64_t size = positive_arg(stage, key, 1);
    auto flag = cli.flag_names.find(key);
    message += fmt::format(
        ". The global {} {} applies to every stage (vLLM-Omni issue #5003); set it only on the stages that need it, "
        "with their devices, e.g. --stage-overrides '{{\"{}\": {{\"{}\": {}, \"devices\": \"...\"}}}}', or in the "
        "deploy YAML",
        flag != cli.flag_names.end() ? flag->second : std::string("--") + key, size, stage.topology->stage_id, key,
        size);
    break;
  }
  throw Error(ErrorCode::kInvalidConfig, message);
}

}  // namespace

EffectiveConfig build_effective_config(const PipelineRegistry& registry, const CliConfigInputs& cli,
                                       const ConfigEnvironment& environment) {
  EffectiveConfig out;
  out.model = cli.model;
  out.platform = environment.platform;

  PipelineResolution resolution;
  DeployConfig deploy = load_deploy(registry, cli, environment, resolution);
  out.pipeline = resolution.pipeline;
  out.pipeline_reason = resolution.reason;
  out.deploy_files = deploy.files;
  out.session_mode = deploy.session_mode;
  const PipelineConfig& pipeline = *out.pipeline;

  for (const auto& stage : deploy.stages) {
    if (!pipeline.find_stage(stage.stage_id)) {
      std::vector<int> ids;
      for (const auto& s : pipeline.stages) ids.push_back(s.stage_id);
      throw_error(ErrorCode::kInvalidConfig, "{}: stage {} is not a stage of pipeline '{}' (stages: {})",
                  source_of(stage.sources, "stage_id").file.empty() ? fmt::format("{}", fmt::join(deploy.files, ", "))
                                                                    : source_of(stage.sources, "stage_id").file,
                  stage.stage_id, pipeline.model_type, fmt::join(ids, ", "));
    }
  }
  for (const auto& [name, connector] : deploy.connectors) {
    out.connectors[name] = connector;
    out.connector_sources[name] = source_of(deploy.sources, "connectors." + name);
  }

  const std::vector<std::pair<int, int>> edges = pipeline_edges(pipeline, deploy);
  resolve_async_chunk(out, deploy, cli, edges);
  const std::map<int, OrderedJson> overrides =
      cli.stage_overrides.empty() ? std::map<int, OrderedJson>{} : parse_stage_overrides(cli.stage_overrides, pipeline);
  const OrderedJson pipeline_wide = deploy.pipeline_wide_fields();

  for (const StagePipelineConfig& topology : pipeline.stages) {
    EffectiveStage stage;
    stage.topology = &topology;
    const StageDeployConfig* placed = deploy.find_stage(topology.stage_id);
    const StageDeployConfig empty_stage;
    const StageDeployConfig& layer = placed ? *placed : empty_stage;

    for (const auto& [key, value] : engine_defaults().items()) set_arg(stage, key, value, kDefaultSource);
    const std::string& arch = topology.model_arch.empty() ? pipeline.model_arch : topology.model_arch;
    if (!arch.empty()) set_arg(stage, "model_arch", arch, kPipelineSource);
    if (!topology.hf_config_name.empty()) set_arg(stage, "hf_config_name", topology.hf_config_name, kPipelineSource);
    if (!topology.engine_output_type.empty()) {
      set_arg(stage, "engine_output_type", topology.engine_output_type, kPipelineSource);
    }
    if (topology.retains_state_across_chunks) set_arg(stage, "retains_state_across_chunks", true, kPipelineSource);

    for (const auto& [key, value] : pipeline_wide.items()) set_arg(stage, key, value, source_of(deploy.sources, key));
    const OrderedJson typed_fields = layer.engine_fields();
    for (const auto& [key, value] : typed_fields.items()) {
      stage.engine_args[key] = value;
      copy_prefixed_sources(stage.sources, layer.sources, key);
    }
    for (const auto& [key, value] : layer.engine_extras.items()) {
      set_arg(stage, key, value, source_of(layer.sources, "engine_extras." + key));
    }
    stage.engine_extras = layer.engine_extras;

    stage.async_chunk = out.async_chunk && layer.async_chunk.value_or(true);
    set_arg(stage, "async_chunk", stage.async_chunk,
            layer.async_chunk && out.async_chunk ? source_of(layer.sources, "async_chunk") : out.async_chunk_source);
    if (!topology.requires_multimodal_data && !stage.engine_args.contains("skip_mm_profiling")) {
      set_arg(stage, "skip_mm_profiling", true, kPipelineSource);
    }

    stage.devices = layer.devices;
    if (layer.devices) stage.sources["devices"] = source_of(layer.sources, "devices");
    stage.num_replicas = layer.num_replicas;
    stage.sources["num_replicas"] = source_of(layer.sources, "num_replicas");
    stage.env = layer.env;
    copy_prefixed_sources(stage.sources, layer.sources, "env");
    stage.default_sampling_params = layer.default_sampling_params;
    copy_prefixed_sources(stage.sources, layer.sources, "default_sampling_params");
    stage.default_pooling_params = layer.default_pooling_params;
    copy_prefixed_sources(stage.sources, layer.sources, "default_pooling_params");
    stage.input_connectors = layer.input_connectors;
    stage.output_connectors = layer.output_connectors;
    copy_prefixed_sources(stage.sources, layer.sources, "input_connectors");
    copy_prefixed_sources(stage.sources, layer.sources, "output_connectors");

    for (const auto& [key, value] : cli.engine_args.items()) {
      auto flag = cli.flag_names.find(key);
      const Provenance source{Layer::kCli, "", flag != cli.flag_names.end() ? flag->second : "--" + key};
      if (key == "default_sampling_params") {
        // --default-sampling-params '{"<stage id>": {...}}': over the deploy's defaults of that stage.
        if (!value.is_object()) {
          throw_error(ErrorCode::kInvalidConfig, "{}: must be a JSON object of stage id -> parameters, got {}",
                      source.explain(), value.dump());
        }
        if (auto it = value.find(std::to_string(topology.stage_id)); it != value.end()) {
          if (!it->is_object()) {
            throw_error(ErrorCode::kInvalidConfig, "{}: the parameters of stage {} must be an object, got {}",
                        source.explain(), topology.stage_id, it->dump());
          }
          deep_merge(stage.default_sampling_params, *it);
          for (const auto& [name, unused] : it->items()) stage.sources["default_sampling_params." + name] = source;
        }
        continue;
      }
      set_arg(stage, key, value, source);
    }
    if (auto it = overrides.find(topology.stage_id); it != overrides.end()) apply_stage_override(stage, it->second);

    apply_sampling_constraints(stage);
    out.stages.push_back(std::move(stage));
  }

  check_async_edges(out, edges);
  check_connectors(out, edges);
  for (const auto& stage : out.stages) check_devices(stage, cli);
  return out;
}

}  // namespace omni::config
