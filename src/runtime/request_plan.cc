#include "runtime/request_plan.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "base/error.h"

namespace omni::runtime {

namespace {

void merge_into(Json& target, const Json& overlay) {
  for (const auto& [key, value] : overlay.items()) target[key] = value;
}

}  // namespace

int final_stage_for(const PipelineSpec& pipeline, const std::vector<std::string>& modalities) {
  std::vector<std::string> available;
  for (auto it = pipeline.stages.rbegin(); it != pipeline.stages.rend(); ++it) {
    if (!it->final_output) continue;
    if (modalities.empty() ||
        std::find(modalities.begin(), modalities.end(), it->final_output_type) != modalities.end()) {
      return it->stage_id;
    }
    available.push_back(it->final_output_type);
  }
  std::reverse(available.begin(), available.end());
  throw_error(ErrorCode::kInvalidArgument, "modalities: this pipeline cannot produce {}; it produces {}",
              fmt::join(modalities, ", "), fmt::join(available, ", "));
}

RequestPlan plan_request(const PipelineSpec& pipeline, const GenerationRequest& request) {
  if (request.sampling_params_list.size() > pipeline.stages.size()) {
    throw_error(ErrorCode::kInvalidArgument, "sampling_params_list has {} entries; the pipeline has {} stages",
                request.sampling_params_list.size(), pipeline.stages.size());
  }
  if (!request.sampling_params.is_object()) {
    throw_error(ErrorCode::kInvalidArgument, "sampling_params must be an object");
  }
  RequestPlan plan;
  plan.final_stage = final_stage_for(pipeline, request.output_modalities);

  std::set<int> needed{plan.final_stage};
  // input_sources only point to earlier stages, so one descending pass collects all ancestors.
  for (int id = plan.final_stage; id >= 0; --id) {
    if (!needed.count(id)) continue;
    for (int source : pipeline.stages[id].input_sources) needed.insert(source);
  }
  plan.stages.assign(needed.begin(), needed.end());

  for (int id : plan.stages) {
    const StageSpec& stage = pipeline.stages[id];
    for (int source : stage.input_sources) plan.consumers[source].push_back(id);
    plan.consumers.try_emplace(id);

    Json params = stage.default_sampling_params.is_object() ? stage.default_sampling_params : Json::object();
    if (id == plan.final_stage) merge_into(params, request.sampling_params);
    if (static_cast<size_t>(id) < request.sampling_params_list.size()) {
      const Json& entry = request.sampling_params_list[id];
      if (!entry.is_null() && !entry.is_object()) {
        throw_error(ErrorCode::kInvalidArgument, "sampling_params_list[{}] must be an object, not {}", id,
                    entry.type_name());
      }
      if (entry.is_object()) merge_into(params, entry);
    }
    merge_into(params, stage.sampling_constraints);
    if (auto n = params.find("n"); id != plan.final_stage && n != params.end() && *n != 1) {
      // The next stage takes one token sequence; several choices have no meaning there.
      throw_error(ErrorCode::kInvalidArgument,
                  "n: stage {} feeds a later stage (the final one is {}), so it generates one choice, not {}", id,
                  plan.final_stage, n->dump());
    }
    plan.sampling_params[id] = std::move(params);
  }
  return plan;
}

}  // namespace omni::runtime
