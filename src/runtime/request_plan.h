// How one request maps onto a pipeline: which stage produces the client-visible output, which
// stages run (that stage and everything it depends on through input_sources), and each running
// stage's sampling parameters. A pure function of the pipeline and the request, so API threads
// compute it before queueing and invalid requests fail before anything starts.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/json.h"
#include "runtime/serving_backend.h"
#include "runtime/stage_spec.h"

namespace omni::runtime {

struct RequestPlan {
  int final_stage = 0;
  std::vector<int> stages;  // the stages that run, ascending; stages.front() is the entry stage
  // For each running stage, the running stages that take its output (its edges on this route).
  std::map<int, std::vector<int>> consumers;
  std::map<int, Json> sampling_params;  // by stage id
};

// The last stage with final_output whose final_output_type is one of `modalities`; with no
// modalities, the last stage with final_output. Throws kInvalidArgument naming the modalities
// the pipeline can produce when none matches.
int final_stage_for(const PipelineSpec& pipeline, const std::vector<std::string>& modalities);

// Sampling parameters of each stage, lowest to highest precedence: the stage's
// default_sampling_params, the request's sampling_params (final stage only), the request's
// sampling_params_list[stage_id], the stage's sampling_constraints. Objects merge key by key
// (top level). Throws kInvalidArgument when sampling_params_list is longer than the pipeline or
// an entry is not an object (null entries mean "defaults"), or when a stage before the final one
// would generate n != 1 choices.
RequestPlan plan_request(const PipelineSpec& pipeline, const GenerationRequest& request);

}  // namespace omni::runtime
