// How one request maps onto a pipeline: which stages deliver client-visible outputs, which stages
// run (those and everything they depend on through input_sources), and each running stage's
// sampling parameters. A pure function of the pipeline and the request, so API threads compute it
// before queueing and invalid requests fail before anything starts.
//
// The outputs follow the request's modalities: the last stage with final_output whose
// final_output_type is requested is the route's end, and every final-output stage on its route
// whose type is requested delivers to the client. For a pipeline text stage 0 → stage 1 → audio
// stage 2: ["text"] runs and delivers stage 0 only; ["audio"] runs all three and delivers stage 2's
// audio only. Without modalities the request gets the pipeline's default: the route of the last
// final-output stage and every final-output stage on it (there: stage 0's text and stage 2's audio).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/json.h"
#include "runtime/serving_backend.h"
#include "runtime/stage_spec.h"

namespace omni::runtime {

struct RequestPlan {
  // The stages whose outputs go to the client, ascending, never empty. The request has finished
  // once each of them has.
  std::vector<int> output_stages;
  // The stage the request's top-level sampling_params are for (its n choices, max_tokens,
  // logprobs…) and whose generated tokens usage counts: the text-output stage on the route when
  // there is one (even when the request does not ask for its text), else the last output stage.
  int primary_stage = 0;
  std::vector<int> stages;  // the stages that run, ascending; stages.front() is the entry stage
  // For each running stage, the running stages that take its output (its edges on this route).
  std::map<int, std::vector<int>> consumers;
  std::map<int, Json> sampling_params;  // by stage id

  bool delivers(int stage_id) const;
};

// The stages that deliver a request's outputs (see above), ascending. Throws kInvalidArgument
// naming the modalities the pipeline can produce when none of `modalities` matches.
std::vector<int> output_stages_for(const PipelineSpec& pipeline, const std::vector<std::string>& modalities);

// Sampling parameters of each stage, lowest to highest precedence: the stage's
// default_sampling_params, the request's sampling_params (primary stage only), the request's
// sampling_params_list[stage_id], the stage's sampling_constraints. Objects merge key by key
// (top level). Throws kInvalidArgument when sampling_params_list is longer than the pipeline or
// an entry is not an object (null entries mean "defaults"), or when a stage that feeds another
// stage on the route would generate n != 1 choices.
RequestPlan plan_request(const PipelineSpec& pipeline, const GenerationRequest& request);

}  // namespace omni::runtime
