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

bool delivers_modality(const StageSpec& stage, const std::vector<std::string>& modalities) {
  return stage.final_output && (modalities.empty() || std::find(modalities.begin(), modalities.end(),
                                                                stage.final_output_type) != modalities.end());
}

// `end` and every stage it depends on, ascending.
std::vector<int> route_to(const PipelineSpec& pipeline, int end) {
  std::set<int> needed{end};
  // input_sources only point to earlier stages, so one descending pass collects all ancestors.
  for (int id = end; id >= 0; --id) {
    if (!needed.count(id)) continue;
    for (int source : pipeline.stages[id].input_sources) needed.insert(source);
  }
  return {needed.begin(), needed.end()};
}

int last_delivering_stage(const PipelineSpec& pipeline, const std::vector<std::string>& modalities) {
  std::vector<std::string> available;
  for (auto it = pipeline.stages.rbegin(); it != pipeline.stages.rend(); ++it) {
    if (delivers_modality(*it, modalities)) return it->stage_id;
    if (it->final_output) available.push_back(it->final_output_type);
  }
  if (modalities.empty()) throw_error(ErrorCode::kInvalidArgument, "this pipeline has no final-output stage");
  std::reverse(available.begin(), available.end());
  throw_error(ErrorCode::kInvalidArgument, "modalities: this pipeline cannot produce {}; it produces {}",
              fmt::join(modalities, ", "), fmt::join(available, ", "));
}

}  // namespace

bool RequestPlan::delivers(int stage_id) const {
  return std::find(output_stages.begin(), output_stages.end(), stage_id) != output_stages.end();
}

std::vector<int> output_stages_for(const PipelineSpec& pipeline, const std::vector<std::string>& modalities) {
  std::vector<int> outputs;
  for (int id : route_to(pipeline, last_delivering_stage(pipeline, modalities))) {
    if (delivers_modality(pipeline.stages[id], modalities)) outputs.push_back(id);
  }
  return outputs;
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
  plan.output_stages = output_stages_for(pipeline, request.output_modalities);
  plan.stages = route_to(pipeline, plan.output_stages.back());
  plan.primary_stage = plan.output_stages.back();
  for (int id : plan.stages) {
    const StageSpec& stage = pipeline.stages[id];
    if (stage.final_output && stage.final_output_type == "text") plan.primary_stage = id;
  }

  for (int id : plan.stages) {
    const StageSpec& stage = pipeline.stages[id];
    for (int source : stage.input_sources) plan.consumers[source].push_back(id);
    plan.consumers.try_emplace(id);
  }
  for (int id : plan.stages) {
    const StageSpec& stage = pipeline.stages[id];
    Json params = stage.default_sampling_params.is_object() ? stage.default_sampling_params : Json::object();
    if (id == plan.primary_stage) merge_into(params, request.sampling_params);
    if (static_cast<size_t>(id) < request.sampling_params_list.size()) {
      const Json& entry = request.sampling_params_list[id];
      if (!entry.is_null() && !entry.is_object()) {
        throw_error(ErrorCode::kInvalidArgument, "sampling_params_list[{}] must be an object, not {}", id,
                    entry.type_name());
      }
      if (entry.is_object()) merge_into(params, entry);
    }
    merge_into(params, stage.sampling_constraints);
    const std::vector<int>& consumers = plan.consumers.at(id);
    if (auto n = params.find("n"); !consumers.empty() && n != params.end() && *n != 1) {
      // The next stage takes one token sequence; several choices have no meaning there.
      throw_error(ErrorCode::kInvalidArgument,
                  "n: stage {} feeds stage {} on this request's route, so it generates one choice, not {}", id,
                  consumers.front(), n->dump());
    }
    plan.sampling_params[id] = std::move(params);
  }
  return plan;
}

}  // namespace omni::runtime
