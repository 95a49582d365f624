#include "config/deploy_loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <regex>
#include <set>
#include <system_error>

#include "base/error.h"
#include "base/log.h"
#include "base/yaml.h"
#include "config/json_merge.h"

namespace omni::config {

namespace fs = std::filesystem;

namespace {

// A stage entry as written in one or more files, normalized to the flat layout, before typing.
struct RawStage {
  int stage_id = 0;
  OrderedJson fields = OrderedJson::object();
  SourceMap sources;
};

struct RawPlatform {
  OrderedJson settings = OrderedJson::object();  // keys other than stages
  std::vector<RawStage> stages;
};

// A deploy document after the base_config chain is merged, before typing.
struct RawDeploy {
  OrderedJson top = OrderedJson::object();  // everything except stages and platforms
  SourceMap top_sources;
  std::vector<RawStage> stages;
  std::map<std::string, RawPlatform> platforms;
  std::vector<std::string> files;
};

// Aliases let a small YAML file expand into an enormous tree; the limit keeps a hostile or
// broken file from exhausting memory.
constexpr size_t kMaxYamlNodes = 1'000'000;
constexpr const char* kTopLevelKeys[] = {"base_config",    "async_chunk", "session_mode", "active_stream_window",
                                         "duplex_session", "connectors",  "edges",        "stages",
                                         "platforms",      "pipeline",    "model_runner"};

OrderedJson scalar_to_ordered(const YAML::Node& node) {
  Json scalar = yaml_to_json(node);
  switch (scalar.type()) {
    case Json::value_t::boolean:
      return scalar.get<bool>();
    case Json::value_t::number_integer:
      return scalar.get<int64_t>();
    case Json::value_t::number_unsigned:
      return scalar.get<uint64_t>();
    case Json::value_t::number_float:
      return scalar.get<double>();
    case Json::value_t::string:
      return scalar.get<std::string>();
    default:
      return nullptr;
  }
}

// Like base's yaml_to_json, but keeps the file's key order and bounds the expanded size.
OrderedJson yaml_to_ordered(const YAML::Node& node, const std::string& file, size_t& budget) {
  if (budget == 0) {
    throw_error(ErrorCode::kInvalidConfig, "{}: document too large (more than {} nodes after alias expansion)", file,
                kMaxYamlNodes);
  }
  --budget;
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return nullptr;
    case YAML::NodeType::Scalar:
      return scalar_to_ordered(node);
    case YAML::NodeType::Sequence: {
      OrderedJson out = OrderedJson::array();
      for (const auto& item : node) out.push_back(yaml_to_ordered(item, file, budget));
      return out;
    }
    case YAML::NodeType::Map: {
      OrderedJson out = OrderedJson::object();
      for (const auto& item : node) {
        if (!item.first.IsScalar()) {
          throw_error(ErrorCode::kInvalidConfig, "{}:{}:{}: mapping keys must be plain strings", file,
                      item.first.Mark().line + 1, item.first.Mark().column + 1);
        }
        out[item.first.Scalar()] = yaml_to_ordered(item.second, file, budget);
      }
      return out;
    }
  }
  return nullptr;
}

bool is_pipeline_only_key(std::string_view key) {
  return std::find(std::begin(kPipelineOnlyKeys), std::end(kPipelineOnlyKeys), key) != std::end(kPipelineOnlyKeys);
}

// Records `provenance` for `key` and, for an object under a deep-merge key, for each of its keys.
void record_sources(SourceMap& sources, const std::string& key, const OrderedJson& value,
                    const Provenance& provenance) {
  if (is_deep_merge_key(key) && value.is_object() && !value.empty()) {
    for (const auto& [sub, unused] : value.items()) sources[key + "." + sub] = provenance;
  } else {
    sources[key] = provenance;
  }
}

void erase_sources(SourceMap& sources, const std::string& key) {
  sources.erase(key);
  const std::string prefix = key + ".";
  for (auto it = sources.lower_bound(prefix); it != sources.end() && it->first.rfind(prefix, 0) == 0;) {
    it = sources.erase(it);
  }
}

int read_stage_id(const OrderedJson& entry, const std::string& where) {
  auto it = entry.find("stage_id");
  if (it == entry.end()) throw_error(ErrorCode::kInvalidConfig, "{}: missing stage_id", where);
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 1'000'000) {
    throw_error(ErrorCode::kInvalidConfig, "{}: stage_id must be a non-negative integer, got {}", where,
                json_text(*it));
  }
  return static_cast<int>(it->get<int64_t>());
}

// Normalizes one stage entry of one file: the nested engine_args:/runtime: layout is folded into
// the flat one (nested wins), and keys the schema does not know move into engine_extras.
RawStage normalize_stage(const OrderedJson& entry, const std::string& where, const Provenance& provenance) {
  if (!entry.is_object()) throw_error(ErrorCode::kInvalidConfig, "{}: a stage entry must be a mapping", where);
  RawStage stage;
  stage.stage_id = read_stage_id(entry, where);
  const std::string stage_where = fmt::format("{} (stage {})", where, stage.stage_id);

  OrderedJson flat = OrderedJson::object();
  for (const auto& [key, value] : entry.items()) {
    if (is_pipeline_only_key(key)) {
      throw_error(ErrorCode::kInvalidConfig,
                  "{}: '{}' is a pipeline (topology) field, fixed by the model's registered pipeline; deploy YAML "
                  "only places and sizes stages",
                  stage_where, key);
    }
    if (key == "engine_args" || key == "runtime" || key == "stage_id") continue;
    flat[key] = value;
  }
  for (const char* nested : {"engine_args", "runtime"}) {
    auto it = entry.find(nested);
    if (it == entry.end() || it->is_null()) continue;
    if (!it->is_object()) throw_error(ErrorCode::kInvalidConfig, "{}: {} must be a mapping", stage_where, nested);
    for (const auto& [key, value] : it->items()) {
      if (is_pipeline_only_key(key)) {
        throw_error(ErrorCode::kInvalidConfig,
                    "{}: '{}' is a pipeline (topology) field and cannot be set in a deploy YAML", stage_where, key);
      }
      auto existing = flat.find(key);
      if (existing != flat.end() && existing->is_object() && value.is_object()) {
        deep_merge(*existing, value);
      } else {
        flat[key] = value;
      }
    }
  }

  OrderedJson extras = OrderedJson::object();
  if (auto it = flat.find("engine_extras"); it != flat.end() && !it->is_null()) {
    if (!it->is_object()) throw_error(ErrorCode::kInvalidConfig, "{}: engine_extras must be a mapping", stage_where);
    extras = *it;
  }
  stage.fields["stage_id"] = stage.stage_id;
  for (const auto& [key, value] : flat.items()) {
    if (key == "engine_extras") continue;
    if (is_stage_reserved_key(key) || is_stage_engine_field(key)) {
      stage.fields[key] = value;
    } else {
      OrderedJson leftover = OrderedJson::object();
      leftover[key] = value;
      deep_merge(extras, leftover);
    }
  }
  if (!extras.empty()) stage.fields["engine_extras"] = extras;
  for (const auto& [key, value] : stage.fields.items()) {
    record_sources(stage.sources, key, value, provenance);
  }
  return stage;
}

std::vector<RawStage> normalize_stage_list(const OrderedJson& list, const std::string& where,
                                           const Provenance& provenance) {
  std::vector<RawStage> out;
  if (list.is_null()) return out;
  if (!list.is_array()) throw_error(ErrorCode::kInvalidConfig, "{}: must be a list of stage entries", where);
  std::set<int> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    RawStage stage = normalize_stage(list[i], fmt::format("{}[{}]", where, i), provenance);
    if (!seen.insert(stage.stage_id).second) {
      throw_error(ErrorCode::kInvalidConfig, "{}: stage_id {} appears twice", where, stage.stage_id);
    }
    out.push_back(std::move(stage));
  }
  return out;
}

// Writes the keys of `overlay` into `base`. With `recursive`, deep-merge keys merge at every
// level (overlays); without, one level only (platform sections). `relabel` maps the overlay's
// recorded provenance to the one stored (platform sections keep the file, change the layer).
void merge_stage(RawStage& base, const RawStage& overlay, bool recursive,
                 const std::function<Provenance(const Provenance&)>& relabel) {
  for (const auto& [key, value] : overlay.fields.items()) {
    if (key == "stage_id") continue;
    auto existing = base.fields.find(key);
    const bool merge_dicts = (is_deep_merge_key(key) || (key == "env" && !recursive)) &&
                             existing != base.fields.end() && existing->is_object() && value.is_object();
    if (merge_dicts) {
      for (const auto& [sub, sub_value] : value.items()) {
        auto old = existing->find(sub);
        if (recursive && old != existing->end() && old->is_object() && sub_value.is_object()) {
          deep_merge(*old, sub_value);
        } else {
          (*existing)[sub] = sub_value;
        }
      }
    } else {
      base.fields[key] = value;
      erase_sources(base.sources, key);
    }
    const std::string prefix = key + ".";
    for (const auto& [source_key, provenance] : overlay.sources) {
      if (source_key == key || source_key.rfind(prefix, 0) == 0) base.sources[source_key] = relabel(provenance);
    }
  }
}

Provenance same_provenance(const Provenance& p) { return p; }

std::vector<RawStage> merge_stage_lists(std::vector<RawStage> base, const std::vector<RawStage>& overlay) {
  for (const RawStage& stage : overlay) {
    auto it = std::find_if(base.begin(), base.end(), [&](const RawStage& s) { return s.stage_id == stage.stage_id; });
    if (it == base.end()) {
      base.push_back(stage);
    } else {
      merge_stage(*it, stage, true, same_provenance);
    }
  }
  return base;
}

std::map<std::string, RawPlatform> parse_platforms(const OrderedJson& value, const std::string& file) {
  std::map<std::string, RawPlatform> out;
  if (value.is_null()) return out;
  if (!value.is_object()) throw_error(ErrorCode::kInvalidConfig, "{}: platforms must be a mapping", file);
  for (const auto& [name, section] : value.items()) {
    if (std::find(std::begin(kPlatformNames), std::end(kPlatformNames), name) == std::end(kPlatformNames)) {
      throw_error(ErrorCode::kInvalidConfig, "{}: unknown platform '{}' under platforms (allowed: {})", file, name,
                  fmt::join(kPlatformNames, ", "));
    }
    RawPlatform platform;
    if (section.is_null()) {
      out[name] = platform;
      continue;
    }
    if (!section.is_object()) throw_error(ErrorCode::kInvalidConfig, "{}: platforms.{} must be a mapping", file, name);
    for (const auto& [key, setting] : section.items()) {
      if (key == "stages") {
        platform.stages =
            normalize_stage_list(setting, fmt::format("{}: platforms.{}.stages", file, name), Provenance::deploy(file));
      } else {
        platform.settings[key] = setting;
      }
    }
    out[name] = std::move(platform);
  }
  return out;
}

// Whether `reader` can read `path`; other errors (not a regular file…) propagate.
bool readable(const fs::path& path, const DeployFileReader& reader) {
  try {
    reader(path);
    return true;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kNotFound) return false;
    throw;
  }
}

fs::path resolve_base_path(const std::string& base, const fs::path& overlay, const fs::path& bundled_dir,
                           const DeployFileReader& reader) {
  fs::path candidate = fs::path(base).is_absolute() ? fs::path(base) : overlay.parent_path() / base;
  candidate = candidate.lexically_normal();
  if (bundled_dir.empty() || fs::path(base).has_parent_path() || readable(candidate, reader)) return candidate;
  fs::path bundled = (bundled_dir / base).lexically_normal();
  return readable(bundled, reader) ? bundled : candidate;
}

RawDeploy load_raw(std::string_view text, const fs::path& path, const DeployLoadOptions& options,
                   std::vector<std::string>& chain) {
  const std::string file = path.string();
  if (std::find(chain.begin(), chain.end(), file) != chain.end()) {
    chain.push_back(file);
    throw_error(ErrorCode::kInvalidConfig, "deploy config base_config cycle: {}", fmt::join(chain, " -> "));
  }
  chain.push_back(file);

  size_t budget = kMaxYamlNodes;
  OrderedJson doc = yaml_to_ordered(parse_yaml(text, file), file, budget);
  if (doc.is_null()) doc = OrderedJson::object();
  if (!doc.is_object()) throw_error(ErrorCode::kInvalidConfig, "{}: a deploy config must be a mapping", file);
  if (doc.contains("stage_args")) {
    throw_error(ErrorCode::kInvalidConfig,
                "{}: uses the removed `stage_args` schema; stage topology comes from the model's registered pipeline, "
                "and deployment settings go under `stages:` (see docs/configuration.md)",
                file);
  }

  RawDeploy base;
  if (auto it = doc.find("base_config"); it != doc.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>().empty()) {
      throw_error(ErrorCode::kInvalidConfig, "{}: base_config must be a file path", file);
    }
    fs::path base_path = resolve_base_path(it->get<std::string>(), path, options.bundled_dir, options.reader);
    std::string base_text = options.reader(base_path);
    base = load_raw(base_text, base_path, options, chain);
  }
  chain.pop_back();

  const Provenance provenance = Provenance::deploy(file);
  RawDeploy merged = std::move(base);
  merged.files.push_back(file);
  for (const auto& [key, value] : doc.items()) {
    if (key == "base_config") continue;
    if (key == "stages") {
      merged.stages =
          merge_stage_lists(std::move(merged.stages), normalize_stage_list(value, file + ": stages", provenance));
    } else if (key == "platforms") {
      for (auto& [name, overlay] : parse_platforms(value, file)) {
        RawPlatform& target = merged.platforms[name];
        for (const auto& [setting, setting_value] : overlay.settings.items()) target.settings[setting] = setting_value;
        target.stages = merge_stage_lists(std::move(target.stages), overlay.stages);
      }
    } else if (key == "connectors" && value.is_object() && merged.top.contains("connectors") &&
               merged.top["connectors"].is_object()) {
      deep_merge(merged.top["connectors"], value);
      for (const auto& [name, unused] : value.items()) merged.top_sources["connectors." + name] = provenance;
    } else {
      merged.top[key] = value;
      erase_sources(merged.top_sources, key);
      if (key == "connectors" && value.is_object()) {
        for (const auto& [name, unused] : value.items()) merged.top_sources["connectors." + name] = provenance;
      } else {
        merged.top_sources[key] = provenance;
      }
    }
  }
  return merged;
}

void apply_platform(RawDeploy& deploy, const std::string& platform) {
  auto it = deploy.platforms.find(platform);
  if (platform.empty() || it == deploy.platforms.end()) return;
  for (const RawStage& entry : it->second.stages) {
    auto target = std::find_if(deploy.stages.begin(), deploy.stages.end(),
                               [&](const RawStage& s) { return s.stage_id == entry.stage_id; });
    if (target == deploy.stages.end()) {
      spdlog::warn("platforms.{} names stage {}, which the deploy config does not define; ignored", platform,
                   entry.stage_id);
      continue;
    }
    merge_stage(*target, entry, false, [&](const Provenance& p) {
      return Provenance{Layer::kPlatform, p.file, platform};
    });
  }
}

// ---- typing ---------------------------------------------------------------------------------

std::string stage_where(const RawStage& stage, const std::string& key) {
  auto it = stage.sources.find(key);
  if (it == stage.sources.end()) {
    it = stage.sources.lower_bound(key + ".");
  }
  std::string file = it != stage.sources.end() ? it->second.file : std::string("deploy config");
  return fmt::format("{}: stage {}", file, stage.stage_id);
}

std::map<std::string, std::string> parse_connector_map(const OrderedJson& value, const std::string& where,
                                                       const char* key, const char* prefix) {
  std::map<std::string, std::string> out;
  if (value.is_null()) return out;
  if (!value.is_object()) throw_error(ErrorCode::kInvalidConfig, "{}: {} must be a mapping", where, key);
  static const std::regex kEdgeKey("^(from|to)_stage_[0-9]{1,6}$");
  for (const auto& [edge, connector] : value.items()) {
    if (edge.rfind(prefix, 0) != 0 || !std::regex_match(edge, kEdgeKey)) {
      throw_error(ErrorCode::kInvalidConfig, "{}: {} key '{}' must be {}<stage id>", where, key, edge, prefix);
    }
    if (!connector.is_string()) {
      throw_error(ErrorCode::kInvalidConfig, "{}: {}.{} must name a connector, got {}", where, key, edge,
                  json_text(connector));
    }
    out[edge] = connector.get<std::string>();
  }
  return out;
}

template <typename T>
void assign_field(std::optional<T>& field, const OrderedJson& value) {
  if (value.is_null()) {
    field.reset();
  } else {
    field = value.get<T>();
  }
}

StageDeployConfig type_stage(const RawStage& raw) {
  StageDeployConfig stage;
  stage.stage_id = raw.stage_id;
  stage.sources = raw.sources;
  for (const auto& [key, value] : raw.fields.items()) {
    const std::string where = stage_where(raw, key);
    if (key == "stage_id") continue;
    if (key == "devices") {
      if (value.is_string()) {
        stage.devices = value.get<std::string>();
      } else if (value.is_number_integer()) {
        stage.devices = std::to_string(value.get<int64_t>());
      } else if (!value.is_null()) {
        throw_error(ErrorCode::kInvalidConfig, "{}: devices must be a string of device indices like \"0,1\", got {}",
                    where, json_text(value));
      }
    } else if (key == "num_replicas") {
      if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > 4096) {
        throw_error(ErrorCode::kInvalidConfig, "{}: num_replicas must be a positive integer, got {}", where,
                    json_text(value));
      }
      stage.num_replicas = value.get<int64_t>();
    } else if (key == "env") {
      if (value.is_null()) continue;
      if (!value.is_object()) throw_error(ErrorCode::kInvalidConfig, "{}: env must be a mapping", where);
      stage.env = value;
    } else if (key == "async_chunk") {
      if (value.is_null()) continue;
      if (!value.is_boolean()) throw_error(ErrorCode::kInvalidConfig, "{}: async_chunk must be true or false", where);
      stage.async_chunk = value.get<bool>();
    } else if (key == "input_connectors") {
      stage.input_connectors = parse_connector_map(value, where, "input_connectors", "from_stage_");
    } else if (key == "output_connectors") {
      stage.output_connectors = parse_connector_map(value, where, "output_connectors", "to_stage_");
    } else if (key == "default_sampling_params" || key == "default_pooling_params") {
      if (value.is_null()) continue;
      if (!value.is_object()) throw_error(ErrorCode::kInvalidConfig, "{}: {} must be a mapping", where, key);
      (key == "default_sampling_params" ? stage.default_sampling_params : stage.default_pooling_params) = value;
    } else if (key == "engine_extras") {
      stage.engine_extras = value;
    } else {
      check_field_type(key, value, where);
      if (key == "subtalker_sampling_params" && !value.is_null() && !value.is_object()) {
        throw_error(ErrorCode::kInvalidConfig, "{}: subtalker_sampling_params must be a mapping", where);
      }
#define OMNI_ASSIGN_FIELD(name, type) \
  if (key == #name) assign_field(stage.name, value);
      OMNI_STAGE_ENGINE_FIELDS(OMNI_ASSIGN_FIELD)
#undef OMNI_ASSIGN_FIELD
    }
  }
  return stage;
}

double positive_number(const OrderedJson& section, const char* key, double fallback, const std::string& where) {
  auto it = section.find(key);
  if (it == section.end() || it->is_null()) return fallback;
  if (!it->is_number() || it->get<double>() <= 0) {
    throw_error(ErrorCode::kInvalidConfig, "{}: duplex_session.{} must be a positive number, got {}", where, key,
                json_text(*it));
  }
  return it->get<double>();
}

DuplexSessionConfig type_duplex_session(const OrderedJson& value, const std::string& where) {
  DuplexSessionConfig out;
  if (value.is_null()) return out;
  if (!value.is_object()) throw_error(ErrorCode::kInvalidConfig, "{}: duplex_session must be a mapping", where);
  static const std::set<std::string> kKeys = {"idle_ttl_s",
                                              "disconnect_grace_s",
                                              "reaper_interval_s",
                                              "resume_replay_ttl_s",
                                              "resume_replay_max_bytes_per_session",
                                              "max_pending_input_bytes_per_session",
                                              "max_pending_turns_per_session",
                                              "max_sessions",
                                              "completed_append_cache_size",
                                              "server_vad_model_path",
                                              "warmup_frames"};
  for (const auto& [key, unused] : value.items()) {
    if (!kKeys.contains(key)) {
      throw_error(ErrorCode::kInvalidConfig, "{}: unknown duplex_session field '{}' (allowed: {})", where, key,
                  fmt::join(kKeys, ", "));
    }
  }
  out.idle_ttl_s = positive_number(value, "idle_ttl_s", out.idle_ttl_s, where);
  out.disconnect_grace_s = positive_number(value, "disconnect_grace_s", out.disconnect_grace_s, where);
  out.reaper_interval_s = positive_number(value, "reaper_interval_s", out.reaper_interval_s, where);
  out.resume_replay_ttl_s = positive_number(value, "resume_replay_ttl_s", out.resume_replay_ttl_s, where);
  auto positive_int = [&](const char* key, int64_t fallback) {
    auto it = value.find(key);
    if (it == value.end() || it->is_null()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() <= 0) {
      throw_error(ErrorCode::kInvalidConfig, "{}: duplex_session.{} must be a positive integer, got {}", where, key,
                  json_text(*it));
    }
    return it->get<int64_t>();
  };
  out.resume_replay_max_bytes_per_session =
      positive_int("resume_replay_max_bytes_per_session", out.resume_replay_max_bytes_per_session);
  out.max_pending_input_bytes_per_session =
      positive_int("max_pending_input_bytes_per_session", out.max_pending_input_bytes_per_session);
  out.max_pending_turns_per_session = positive_int("max_pending_turns_per_session", out.max_pending_turns_per_session);
  out.max_sessions = positive_int("max_sessions", out.max_sessions);
  out.completed_append_cache_size = positive_int("completed_append_cache_size", out.completed_append_cache_size);
  if (auto it = value.find("warmup_frames"); it != value.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      throw_error(ErrorCode::kInvalidConfig, "{}: duplex_session.warmup_frames must be a non-negative integer", where);
    }
    out.warmup_frames = it->get<int64_t>();
  }
  if (auto it = value.find("server_vad_model_path"); it != value.end() && !it->is_null()) {
    if (!it->is_string())
      throw_error(ErrorCode::kInvalidConfig, "{}: duplex_session.server_vad_model_path must be a string", where);
    out.server_vad_model_path = it->get<std::string>();
  }
  return out;
}

std::map<std::string, ConnectorSpec> type_connectors(const OrderedJson& value, const SourceMap& sources) {
  std::map<std::string, ConnectorSpec> out;
  if (value.is_null()) return out;
  if (!value.is_object()) {
    auto it = sources.find("connectors");
    throw_error(ErrorCode::kInvalidConfig, "{}: connectors must be a mapping of name to {{name, extra}}",
                it != sources.end() ? it->second.file : "deploy config");
  }
  for (const auto& [name, spec] : value.items()) {
    auto source = sources.find("connectors." + name);
    const std::string where =
        fmt::format("{}: connectors.{}", source != sources.end() ? source->second.file : "deploy config", name);
    if (!spec.is_object()) throw_error(ErrorCode::kInvalidConfig, "{} must be a mapping with `name:`", where);
    ConnectorSpec connector;
    for (const auto& [key, field] : spec.items()) {
      if (key == "name") {
        if (!field.is_string()) throw_error(ErrorCode::kInvalidConfig, "{}.name must be a connector class name", where);
        connector.name = field.get<std::string>();
      } else if (key == "extra") {
        if (field.is_null()) continue;
        if (!field.is_object()) throw_error(ErrorCode::kInvalidConfig, "{}.extra must be a mapping", where);
        connector.extra = field;
      } else {
        throw_error(ErrorCode::kInvalidConfig, "{}: unknown key '{}' (a connector has `name:` and `extra:`)", where,
                    key);
      }
    }
    if (connector.name.empty())
      throw_error(ErrorCode::kInvalidConfig, "{}: missing `name:` (the connector class)", where);
    if (std::find(std::begin(kConnectorClasses), std::end(kConnectorClasses), connector.name) ==
        std::end(kConnectorClasses)) {
      throw_error(ErrorCode::kInvalidConfig, "{}: unknown connector class '{}' (known: {})", where, connector.name,
                  fmt::join(kConnectorClasses, ", "));
    }
    out[name] = std::move(connector);
  }
  return out;
}

int edge_endpoint(const OrderedJson& value, const std::string& where) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > 1'000'000) {
    throw_error(ErrorCode::kInvalidConfig, "{}: an edge endpoint must be a stage id, got {}", where, json_text(value));
  }
  return static_cast<int>(value.get<int64_t>());
}

std::vector<std::pair<int, int>> type_edges(const OrderedJson& value, const std::string& where) {
  std::vector<std::pair<int, int>> out;
  if (value.is_null()) return out;
  if (!value.is_array()) throw_error(ErrorCode::kInvalidConfig, "{}: edges must be a list", where);
  for (const auto& edge : value) {
    if (edge.is_array() && edge.size() == 2) {
      out.emplace_back(edge_endpoint(edge[0], where), edge_endpoint(edge[1], where));
    } else if (edge.is_object() && edge.contains("from") && edge.contains("to")) {
      out.emplace_back(edge_endpoint(edge["from"], where), edge_endpoint(edge["to"], where));
    } else {
      throw_error(ErrorCode::kInvalidConfig, "{}: an edge is [from, to] or {{from: <id>, to: <id>}}, got {}", where,
                  json_text(edge));
    }
  }
  return out;
}

DeployConfig type_deploy(RawDeploy raw, const std::string& platform) {
  DeployConfig out;
  out.files = raw.files;
  out.sources = raw.top_sources;
  for (const auto& [key, value] : raw.top.items()) {
    auto source = raw.top_sources.find(key);
    const std::string file = source != raw.top_sources.end() ? source->second.file : raw.files.back();
    if (key == "async_chunk") {
      if (value.is_null()) continue;
      if (!value.is_boolean()) throw_error(ErrorCode::kInvalidConfig, "{}: async_chunk must be true or false", file);
      out.async_chunk = value.get<bool>();
    } else if (key == "session_mode") {
      if (!value.is_string() || (value != "turn" && value != "duplex")) {
        throw_error(ErrorCode::kInvalidConfig, "{}: session_mode must be 'turn' or 'duplex', got {}", file,
                    json_text(value));
      }
      out.session_mode = value.get<std::string>();
    } else if (key == "model_runner") {
      if (!value.is_string() || (value != "v1" && value != "v2")) {
        throw_error(ErrorCode::kInvalidConfig, "{}: model_runner must be 'v1' or 'v2', got {}", file, json_text(value));
      }
      out.model_runner = value.get<std::string>();
    } else if (key == "duplex_session") {
      out.duplex_session = type_duplex_session(value, file);
    } else if (key == "connectors") {
      out.connectors = type_connectors(value, raw.top_sources);
    } else if (key == "edges") {
      out.edges = type_edges(value, file);
    } else if (key == "pipeline") {
      if (value.is_null()) continue;
      if (!value.is_string()) throw_error(ErrorCode::kInvalidConfig, "{}: pipeline must be a registry key", file);
      out.pipeline = value.get<std::string>();
    } else if (is_pipeline_wide_field(key)) {
      check_field_type(key, value, file);
      if (key == "active_stream_window" && value.is_number_integer() && value.get<int64_t>() < 0) {
        throw_error(ErrorCode::kInvalidConfig, "{}: active_stream_window must be >= 0", file);
      }
#define OMNI_ASSIGN_FIELD(name, type) \
  if (key == #name) assign_field(out.name, value);
      OMNI_PIPELINE_WIDE_FIELDS(OMNI_ASSIGN_FIELD)
#undef OMNI_ASSIGN_FIELD
    } else if (key == "modes") {
      spdlog::warn("{}: the `modes:` section is not supported and is ignored", file);
    } else {
      spdlog::warn("{}: unknown top-level key '{}' ignored (known: {})", file, key, fmt::join(kTopLevelKeys, ", "));
    }
  }
  if (out.model_runner == "v2" && (platform == "npu" || platform == "xpu")) {
    throw_error(ErrorCode::kInvalidConfig, "{}: model_runner v2 is not available on platform {}",
                raw.top_sources.at("model_runner").file, platform);
  }
  for (const RawStage& stage : raw.stages) out.stages.push_back(type_stage(stage));
  return out;
}

}  // namespace

std::string read_deploy_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw_error(ErrorCode::kNotFound, "deploy config {} does not exist", path.string());
  if (!fs::is_regular_file(path, ec)) {
    throw_error(ErrorCode::kInvalidConfig, "deploy config {} is not a regular file", path.string());
  }
  return read_text_file(path);
}

fs::path resolve_deploy_path(const std::string& argument, const fs::path& bundled_dir,
                             const DeployFileReader& reader) {
  std::error_code ec;
  fs::path given = fs::absolute(fs::path(argument), ec).lexically_normal();
  if (readable(given, reader)) return given;
  if (!fs::path(argument).has_parent_path() && !bundled_dir.empty()) {
    fs::path bundled = (bundled_dir / argument).lexically_normal();
    if (readable(bundled, reader)) return bundled;
    throw_error(ErrorCode::kNotFound, "--deploy-config {}: no such file (also looked in the bundled deploy dir {})",
                argument, bundled_dir.string());
  }
  throw_error(ErrorCode::kNotFound, "--deploy-config {}: no such file", argument);
}

DeployConfig parse_deploy_config(std::string_view text, const fs::path& path, const DeployLoadOptions& options) {
  std::vector<std::string> chain;
  RawDeploy raw = load_raw(text, path, options, chain);
  apply_platform(raw, options.platform);
  return type_deploy(std::move(raw), options.platform);
}

DeployConfig load_deploy_config(const fs::path& path, const DeployLoadOptions& options) {
  std::error_code ec;
  fs::path absolute = fs::absolute(path, ec).lexically_normal();
  return parse_deploy_config(options.reader(absolute), absolute, options);
}

}  // namespace omni::config
