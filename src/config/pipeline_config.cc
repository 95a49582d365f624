#include "config/pipeline_config.h"

#include <fmt/format.h>

#include <map>

#include "base/error.h"

namespace omni::config {

std::string_view execution_type_name(ExecutionType type) {
  switch (type) {
    case ExecutionType::kLlmAr:
      return "llm_ar";
    case ExecutionType::kLlmGeneration:
      return "llm_generation";
    case ExecutionType::kDiffusion:
      return "diffusion";
  }
  return "llm_ar";
}

const StagePipelineConfig* PipelineConfig::find_stage(int stage_id) const {
  for (const auto& stage : stages) {
    if (stage.stage_id == stage_id) return &stage;
  }
  return nullptr;
}

void validate_pipeline(const PipelineConfig& pipeline) {
  std::vector<std::string> problems;
  if (pipeline.stages.empty()) problems.push_back("it has no stages");

  std::map<int, int> count_by_id;
  for (const auto& stage : pipeline.stages) ++count_by_id[stage.stage_id];
  for (const auto& [id, count] : count_by_id) {
    if (count > 1) problems.push_back(fmt::format("stage id {} is used by {} stages", id, count));
  }

  bool has_entry = false;
  bool has_terminal = false;
  for (const auto& stage : pipeline.stages) {
    if (stage.input_sources.empty()) has_entry = true;
    if (stage.final_output) has_terminal = true;
    for (int source : stage.input_sources) {
      if (source == stage.stage_id) {
        problems.push_back(fmt::format("stage {} lists itself as an input source", stage.stage_id));
      } else if (!count_by_id.contains(source)) {
        problems.push_back(fmt::format("stage {} has input source {}, which is not a stage", stage.stage_id, source));
      }
    }
  }
  if (!pipeline.stages.empty() && !has_entry) {
    problems.push_back("no entry stage (every stage has input_sources)");
  }
  if (!pipeline.stages.empty() && !has_terminal) {
    problems.push_back("no terminal stage (no stage has final_output)");
  }

  if (!problems.empty()) {
    throw_error(ErrorCode::kInvalidConfig, "pipeline '{}' is invalid: {}", pipeline.model_type,
                fmt::join(problems, "; "));
  }
}

}  // namespace omni::config
