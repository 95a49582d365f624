#include "runtime/request_plan.h"

#include <gtest/gtest.h>

namespace omni::runtime {
namespace {

// thinker (text) → talker → code2wav (audio), the Qwen3-Omni shape.
PipelineSpec omni_pipeline() {
  PipelineSpec p;
  p.stages.resize(3);
  p.stages[0] = {0, {}, true, "text"};
  p.stages[0].default_sampling_params = {{"temperature", 0.7}, {"max_tokens", 100}};
  p.stages[1] = {1, {0}, false, "latents"};
  p.stages[1].default_sampling_params = {{"temperature", 0.9}};
  p.stages[1].sampling_constraints = {{"stop_token_ids", {2150}}};
  p.stages[2] = {2, {1}, true, "audio"};
  return p;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

RequestPlan plan_for(const PipelineSpec& pipeline, std::vector<std::string> modalities) {
  GenerationRequest request;
  request.output_modalities = std::move(modalities);
  return plan_request(pipeline, request);
}

TEST(RequestPlanTest, TextOnlyRequestRunsAndDeliversOnlyTheThinker) {
  RequestPlan plan = plan_for(omni_pipeline(), {"text"});
  EXPECT_EQ(plan.output_stages, std::vector<int>{0});
  EXPECT_EQ(plan.primary_stage, 0);
  EXPECT_EQ(plan.stages, std::vector<int>{0});
  EXPECT_TRUE(plan.consumers.at(0).empty());
  EXPECT_TRUE(plan.delivers(0));
  EXPECT_FALSE(plan.delivers(2));
}

TEST(RequestPlanTest, TheDefaultDeliversTextAndAudioFromTheWholeChain) {
  RequestPlan plan = plan_for(omni_pipeline(), {});
  EXPECT_EQ(plan.output_stages, (std::vector<int>{0, 2}));
  EXPECT_EQ(plan.primary_stage, 0) << "usage and the request's sampling fields belong to the text stage";
  EXPECT_EQ(plan.stages, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(plan.consumers.at(0), std::vector<int>{1});
  EXPECT_EQ(plan.consumers.at(1), std::vector<int>{2});
  EXPECT_TRUE(plan.consumers.at(2).empty());
  EXPECT_FALSE(plan.delivers(1)) << "the talker has no final output";
}

TEST(RequestPlanTest, TextAndAudioIsTheDefault) {
  RequestPlan both = plan_for(omni_pipeline(), {"text", "audio"});
  EXPECT_EQ(both.output_stages, (std::vector<int>{0, 2}));
  EXPECT_EQ(both.stages, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(both.primary_stage, 0);
  EXPECT_EQ(plan_for(omni_pipeline(), {"audio", "text"}).output_stages, (std::vector<int>{0, 2}));
}

TEST(RequestPlanTest, AudioOnlyRunsTheWholeChainButDeliversOnlyTheAudio) {
  RequestPlan plan = plan_for(omni_pipeline(), {"audio"});
  EXPECT_EQ(plan.output_stages, std::vector<int>{2});
  EXPECT_EQ(plan.stages, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(plan.primary_stage, 0) << "the thinker still generates the tokens usage counts";
  EXPECT_FALSE(plan.delivers(0));
}

TEST(RequestPlanTest, SingleOutputPipelinesKeepTheirOneOutput) {
  PipelineSpec text;
  text.stages = {{0, {}, true, "text"}};
  RequestPlan text_plan = plan_for(text, {});
  EXPECT_EQ(text_plan.output_stages, std::vector<int>{0});
  EXPECT_EQ(text_plan.primary_stage, 0);

  PipelineSpec tts;  // talker → code2wav (audio)
  tts.stages = {{0, {}, false, "latents"}, {1, {0}, true, "audio"}};
  RequestPlan tts_plan = plan_for(tts, {"audio"});
  EXPECT_EQ(tts_plan.output_stages, std::vector<int>{1});
  EXPECT_EQ(tts_plan.primary_stage, 1) << "without a text stage the output stage is the primary one";
  EXPECT_EQ(tts_plan.stages, (std::vector<int>{0, 1}));
  EXPECT_EQ(plan_for(tts, {}).output_stages, std::vector<int>{1});
}

TEST(RequestPlanTest, UnknownModalityNamesWhatThePipelineProduces) {
  GenerationRequest request;
  request.output_modalities = {"image"};
  EXPECT_EQ(error_of([&] { plan_request(omni_pipeline(), request); }),
            "modalities: this pipeline cannot produce image; it produces text, audio");
}

TEST(RequestPlanTest, SamplingParamsLayerDefaultsRequestListAndConstraints) {
  GenerationRequest request;
  request.sampling_params = {{"max_tokens", 5}, {"seed", 1}};
  request.sampling_params_list = {Json{{"temperature", 0.1}}, Json{{"stop_token_ids", {1}}, {"top_k", 3}}, nullptr};
  RequestPlan plan = plan_request(omni_pipeline(), request);
  // The request's top-level sampling_params apply to the primary (text) stage only, under its list
  // entry.
  EXPECT_EQ(plan.sampling_params.at(0), (Json{{"temperature", 0.1}, {"max_tokens", 5}, {"seed", 1}}));
  // The pipeline's constraint wins over the request's list entry.
  EXPECT_EQ(plan.sampling_params.at(1), (Json{{"temperature", 0.9}, {"top_k", 3}, {"stop_token_ids", {2150}}}));
  EXPECT_EQ(plan.sampling_params.at(2), Json::object());

  PipelineSpec tts;
  tts.stages = {{0, {}, false, "latents"}, {1, {0}, true, "audio"}};
  request.sampling_params_list.clear();
  EXPECT_EQ(plan_request(tts, request).sampling_params.at(1), (Json{{"max_tokens", 5}, {"seed", 1}}))
      << "without a text stage they are the output stage's";
}

TEST(RequestPlanTest, BadSamplingParamsListIsRejected) {
  GenerationRequest request;
  request.sampling_params_list = {Json::object(), Json::object(), Json::object(), Json::object()};
  EXPECT_EQ(error_of([&] { plan_request(omni_pipeline(), request); }),
            "sampling_params_list has 4 entries; the pipeline has 3 stages");
  request.sampling_params_list = {Json::array()};
  EXPECT_EQ(error_of([&] { plan_request(omni_pipeline(), request); }),
            "sampling_params_list[0] must be an object, not array");
}

TEST(RequestPlanTest, FanInRouteIncludesEveryAncestor) {
  PipelineSpec p;
  p.stages = {{0, {}, false, "text"}, {1, {0}, false, "latents"}, {2, {0, 1}, true, "audio"}};
  RequestPlan plan = plan_request(p, GenerationRequest{});
  EXPECT_EQ(plan.stages, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(plan.consumers.at(0), (std::vector<int>{1, 2}));
}

TEST(StageSpecTest, ValidateNamesTheStageAndField) {
  PipelineSpec p = omni_pipeline();
  p.stages[2].input_sources = {2};
  EXPECT_EQ(error_of([&] { validate_pipeline(p); }),
            "stage 2: input_sources lists stage 2, which is not an earlier stage");
  p = omni_pipeline();
  p.stages[1].input_sources = {};
  EXPECT_EQ(error_of([&] { validate_pipeline(p); }),
            "pipeline must have exactly one entry stage (empty input_sources), has 2");
  p = omni_pipeline();
  p.stages[1].input_connectors[2] = {};
  EXPECT_EQ(error_of([&] { validate_pipeline(p); }),
            "stage 1: input_connectors has from_stage_2, which is not in input_sources");
  p = omni_pipeline();
  p.stages[1].stage_id = 5;
  EXPECT_EQ(error_of([&] { validate_pipeline(p); }), "stage ids must be 0..2 in order; position 1 holds stage 5");
  p = omni_pipeline();
  p.stages.push_back({3, {1, 2}, false, "audio"});
  p.stages[3].async_chunk = true;
  EXPECT_EQ(error_of([&] { validate_pipeline(p); }), "stage 3: async_chunk needs a single input source, has 2");
  p.stages[3].async_chunk = false;
  p.stages[0].async_chunk = true;  // the entry stage has no input to stream: ignored
  EXPECT_NO_THROW(validate_pipeline(p));
  p = omni_pipeline();
  p.stages[0].num_replicas = 0;
  EXPECT_EQ(error_of([&] { validate_pipeline(p); }), "stage 0: num_replicas must be at least 1, not 0");
  EXPECT_NO_THROW(validate_pipeline(omni_pipeline()));
}

TEST(StageSpecTest, JsonRoundTripKeepsEveryField) {
  StageSpec stage{1, {0}, true, "audio"};
  stage.input_connectors[0] = {"SharedMemoryConnector", Json{{"shm_threshold_bytes", 10}}};
  stage.devices = "1,2";
  stage.num_replicas = 2;
  stage.async_chunk = true;
  stage.engine_args = {{"runner", "test-echo"}};
  stage.default_sampling_params = {{"temperature", 0.2}};
  stage.sampling_constraints = {{"seed", 4}};
  StageSpec back = stage_spec_from_json(to_json(stage), "test");
  EXPECT_EQ(to_json(back), to_json(stage));
  EXPECT_EQ(back.input_connectors.at(0).extra["shm_threshold_bytes"], 10);
  EXPECT_EQ(error_of([] {
              stage_spec_from_json(Json{{"stage_id", "one"}}, "stage.json");
            }),
            "stage.json: field 'stage_id' has the wrong type (string)");
  EXPECT_EQ(error_of([] {
              stage_spec_from_json(Json{{"input_connectors", {{"stage0", Json::object()}}}}, "x");
            }),
            "x: input_connectors key 'stage0' must be from_stage_<id>");
}

TEST(RequestPlanTest, OnlyAStageThatFeedsNoOtherMayGenerateSeveralChoices) {
  GenerationRequest request;
  request.output_modalities = {"text"};
  request.sampling_params = {{"n", 3}};
  EXPECT_EQ(plan_request(omni_pipeline(), request).sampling_params.at(0)["n"], 3);

  request.output_modalities = {};  // text and audio: the thinker feeds the talker
  EXPECT_EQ(error_of([&] { plan_request(omni_pipeline(), request); }),
            "n: stage 0 feeds stage 1 on this request's route, so it generates one choice, not 3");

  request.output_modalities = {"audio"};
  request.sampling_params = Json::object();
  request.sampling_params_list = {Json{{"n", 2}}};
  EXPECT_EQ(error_of([&] { plan_request(omni_pipeline(), request); }),
            "n: stage 0 feeds stage 1 on this request's route, so it generates one choice, not 2");
}

}  // namespace
}  // namespace omni::runtime
