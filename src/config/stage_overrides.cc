#include "config/stage_overrides.h"

#include <fmt/format.h>

#include <regex>

#include "base/error.h"
#include "config/deploy_schema.h"
#include "config/json_merge.h"

namespace omni::config {

namespace {

// Deep enough for any real override, shallow enough that merging cannot exhaust the stack.
constexpr int kMaxOverrideDepth = 32;

std::string stage_ids(const PipelineConfig& pipeline) {
  std::vector<int> ids;
  for (const auto& stage : pipeline.stages) ids.push_back(stage.stage_id);
  return fmt::format("{}", fmt::join(ids, ", "));
}

}  // namespace

std::map<int, OrderedJson> parse_stage_overrides(std::string_view text, const PipelineConfig& pipeline) {
  // parse_json reports syntax errors with line and column.
  parse_json(text, "--stage-overrides");
  OrderedJson doc = OrderedJson::parse(text);
  if (!doc.is_object()) {
    throw_error(ErrorCode::kInvalidArgument,
                "--stage-overrides must be a JSON object of stage id to settings, e.g. '{{\"0\": "
                "{{\"max_num_seqs\": 8}}}}'; got {}",
                doc.type_name());
  }
  if (nests_deeper_than(doc, kMaxOverrideDepth)) {
    throw_error(ErrorCode::kInvalidArgument, "--stage-overrides nests deeper than {} levels", kMaxOverrideDepth);
  }
  static const std::regex kStageId("^[0-9]{1,6}$");
  std::map<int, OrderedJson> out;
  for (const auto& [key, settings] : doc.items()) {
    if (!std::regex_match(key, kStageId)) {
      throw_error(ErrorCode::kInvalidArgument,
                  "--stage-overrides: key '{}' is not a stage id (pipeline '{}' has stages {})", key,
                  pipeline.model_type, stage_ids(pipeline));
    }
    const int stage_id = std::stoi(key);
    if (!pipeline.find_stage(stage_id)) {
      throw_error(ErrorCode::kInvalidArgument,
                  "--stage-overrides: stage {} does not exist (pipeline '{}' has stages {})", stage_id,
                  pipeline.model_type, stage_ids(pipeline));
    }
    if (!settings.is_object()) {
      throw_error(ErrorCode::kInvalidArgument, "--stage-overrides: stage {} must map to an object of settings, got {}",
                  stage_id, json_text(settings));
    }
    const std::string where = fmt::format("--stage-overrides: stage {}", stage_id);
    for (const auto& [field, value] : settings.items()) {
      try {
        check_field_type(field, value, where);
      } catch (const Error& e) {
        throw Error(ErrorCode::kInvalidArgument, e.what());
      }
      if (field == "devices" && !value.is_string() && !value.is_number_integer()) {
        throw_error(ErrorCode::kInvalidArgument, "{}: devices must be a string like \"0,1\", got {}", where,
                    json_text(value));
      }
      if (field == "num_replicas" &&
          (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > 4096)) {
        throw_error(ErrorCode::kInvalidArgument, "{}: num_replicas must be a positive integer, got {}", where,
                    json_text(value));
      }
      if ((field == "env" || field == "default_sampling_params" || field == "default_pooling_params") &&
          !value.is_object()) {
        throw_error(ErrorCode::kInvalidArgument, "{}: {} must be an object", where, field);
      }
    }
    out[stage_id] = settings;
  }
  return out;
}

}  // namespace omni::config
