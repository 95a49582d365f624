#include "config/pipeline_registry.h"

#include <gtest/gtest.h>

#include "config_test_util.h"
#include "support/temp_dir.h"

namespace omni::config {
namespace {

using testing::error_message;
using testing::real_registry;

StagePipelineConfig make_stage(int id, std::vector<int> inputs, bool final_output) {
  StagePipelineConfig stage;
  stage.stage_id = id;
  stage.model_stage = "s" + std::to_string(id);
  stage.input_sources = std::move(inputs);
  stage.final_output = final_output;
  return stage;
}

TEST(PipelineValidationTest, EmptyPipelineIsRejected) {
  PipelineConfig pipeline;
  pipeline.model_type = "empty";
  std::string message = error_message([&] { validate_pipeline(pipeline); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("pipeline 'empty' is invalid: it has no stages"), std::string::npos) << message;
}

TEST(PipelineValidationTest, ListsEveryProblemAtOnce) {
  PipelineConfig pipeline;
  pipeline.model_type = "broken";
  pipeline.stages = {make_stage(0, {0}, false), make_stage(1, {7}, false), make_stage(1, {0}, false)};
  std::string message = error_message([&] { validate_pipeline(pipeline); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("stage id 1 is used by 2 stages"), std::string::npos) << message;
  EXPECT_NE(message.find("stage 0 lists itself as an input source"), std::string::npos) << message;
  EXPECT_NE(message.find("stage 1 has input source 7, which is not a stage"), std::string::npos) << message;
  EXPECT_NE(message.find("no entry stage"), std::string::npos) << message;
  EXPECT_NE(message.find("no terminal stage"), std::string::npos) << message;
}

TEST(PipelineValidationTest, RegistrationValidatesAndRejectsDuplicates) {
  PipelineRegistry registry;
  PipelineConfig bad;
  bad.model_type = "bad";
  bad.stages = {make_stage(0, {}, false)};
  error_message([&] { registry.add(bad); }, ErrorCode::kInvalidConfig);
  EXPECT_EQ(registry.find("bad"), nullptr);

  PipelineConfig good;
  good.model_type = "good";
  good.stages = {make_stage(0, {}, false), make_stage(1, {0}, true)};
  registry.add(good);
  ASSERT_NE(registry.find("good"), nullptr);
  std::string message = error_message([&] { registry.add(good); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("'good' is registered twice"), std::string::npos) << message;
}

TEST(RealPipelinesTest, TopologiesAndSamplingConstraints) {
  const PipelineRegistry& registry = real_registry();
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"qwen2_5_omni", "qwen3", "qwen3_omni_moe",
                                                        "qwen3_omni_moe_thinker_only", "qwen3_tts", "z_image"}));
  const PipelineConfig& z_image = registry.get("z_image");
  ASSERT_EQ(z_image.stages.size(), 1u);
  EXPECT_EQ(z_image.stages[0].execution_type, ExecutionType::kDiffusion);
  EXPECT_EQ(z_image.stages[0].final_output_type, "image");

  const PipelineConfig& qwen3 = registry.get("qwen3");
  ASSERT_EQ(qwen3.stages.size(), 1u);
  EXPECT_EQ(qwen3.stages[0].execution_type, ExecutionType::kLlmAr);
  EXPECT_EQ(qwen3.stages[0].final_output_type, "text");

  const PipelineConfig& tts = registry.get("qwen3_tts");
  ASSERT_EQ(tts.stages.size(), 2u);
  EXPECT_EQ(tts.stages[0].execution_type, ExecutionType::kLlmAr);
  EXPECT_EQ(tts.stages[1].execution_type, ExecutionType::kLlmGeneration);
  EXPECT_EQ(tts.stages[1].input_sources, std::vector<int>{0});
  EXPECT_EQ(tts.stages[1].final_output_type, "audio");
  EXPECT_EQ(tts.stages[0].sampling_constraints["stop_token_ids"], Json::parse("[2150]"));

  const PipelineConfig& omni = registry.get("qwen3_omni_moe");
  ASSERT_EQ(omni.stages.size(), 3u);
  EXPECT_EQ(omni.stages[0].model_stage, "thinker");
  EXPECT_EQ(omni.stages[1].model_stage, "talker");
  EXPECT_EQ(omni.stages[2].model_stage, "code2wav");
  EXPECT_EQ(omni.stages[1].sampling_constraints["stop_token_ids"], Json::parse("[2150]"));
  EXPECT_EQ(omni.stages[1].sampling_constraints["detokenize"], false);
  EXPECT_EQ(omni.stages[2].execution_type, ExecutionType::kLlmGeneration);

  const PipelineConfig& omni25 = registry.get("qwen2_5_omni");
  ASSERT_EQ(omni25.stages.size(), 3u);
  EXPECT_EQ(omni25.stages[1].sampling_constraints["stop_token_ids"], Json::parse("[8294]"));
  EXPECT_FALSE(omni25.stages[0].produces_async_chunks);
}

TEST(PipelineResolutionTest, DeployPipelineKeyComesFirst) {
  PipelineResolution r = resolve_pipeline(real_registry(), "Qwen/Qwen3-0.6B", "qwen3_tts");
  EXPECT_EQ(r.pipeline->model_type, "qwen3_tts");
  std::string message = error_message([&] { resolve_pipeline(real_registry(), "x", "nope"); }, ErrorCode::kNotFound);
  EXPECT_NE(message.find("pipeline 'nope' is not registered; registered pipelines: qwen2_5_omni, qwen3"),
            std::string::npos)
      << message;
}

TEST(PipelineResolutionTest, LocalConfigJsonModelTypeThenArchitectures) {
  omni::testing::TempDir dir;
  dir.write("a/config.json", R"({"model_type": "qwen3", "architectures": ["Qwen3TTSForConditionalGeneration"]})");
  dir.write("b/config.json", R"({"model_type": "something_else", "architectures": ["Qwen2_5OmniModel"]})");
  dir.write("c/config.json", R"({"model_type": "qwen3_omni_moe", "enable_audio_output": false})");
  dir.write("d/config.json", R"({"model_type": "qwen3_omni_moe"})");
  PipelineResolution a = resolve_pipeline(real_registry(), (dir.path() / "a").string(), "");
  EXPECT_EQ(a.pipeline->model_type, "qwen3");
  EXPECT_EQ(a.reason, "config.json model_type 'qwen3'");
  PipelineResolution b = resolve_pipeline(real_registry(), (dir.path() / "b").string(), "");
  EXPECT_EQ(b.pipeline->model_type, "qwen2_5_omni");
  EXPECT_EQ(b.reason, "config.json architecture 'Qwen2_5OmniModel'");
  EXPECT_EQ(resolve_pipeline(real_registry(), (dir.path() / "c").string(), "").pipeline->model_type,
            "qwen3_omni_moe_thinker_only");
  EXPECT_EQ(resolve_pipeline(real_registry(), (dir.path() / "d").string(), "").pipeline->model_type, "qwen3_omni_moe");
}

TEST(PipelineResolutionTest, DiffusersModelIndexClassNameAndItsOverride) {
  omni::testing::TempDir dir;
  dir.write("z/model_index.json", R"({"_class_name": "ZImagePipeline"})");
  dir.write("other/model_index.json", R"({"_class_name": "FluxPipeline"})");
  PipelineResolution z = resolve_pipeline(real_registry(), (dir.path() / "z").string(), "");
  EXPECT_EQ(z.pipeline->model_type, "z_image");
  EXPECT_EQ(z.reason, "model_index.json _class_name 'ZImagePipeline'");
  PipelineResolution forced = resolve_pipeline(real_registry(), (dir.path() / "other").string(), "", "ZImagePipeline");
  EXPECT_EQ(forced.pipeline->model_type, "z_image");
  EXPECT_EQ(forced.reason, "--model-class-name 'ZImagePipeline'");
  const std::string message = error_message(
      [&] { resolve_pipeline(real_registry(), (dir.path() / "z").string(), "", "NoSuchPipeline"); },
      ErrorCode::kNotFound);
  EXPECT_NE(message.find("--model-class-name 'NoSuchPipeline' names no registered pipeline"), std::string::npos)
      << message;
  EXPECT_THROW(resolve_pipeline(real_registry(), (dir.path() / "other").string(), ""), Error);
}

TEST(PipelineResolutionTest, KnownIdsWorkWithoutFilesAndByDirectoryName) {
  const PipelineRegistry& registry = real_registry();
  EXPECT_EQ(resolve_pipeline(registry, "Qwen/Qwen3-Omni-30B-A3B-Instruct", "").pipeline->model_type, "qwen3_omni_moe");
  EXPECT_EQ(resolve_pipeline(registry, "Qwen/Qwen3-Omni-30B-A3B-Captioner", "").pipeline->model_type,
            "qwen3_omni_moe_thinker_only");
  EXPECT_EQ(resolve_pipeline(registry, "Qwen/Qwen2.5-Omni-3B", "").pipeline->model_type, "qwen2_5_omni");
  EXPECT_EQ(resolve_pipeline(registry, "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice", "").pipeline->model_type, "qwen3_tts");
  EXPECT_EQ(resolve_pipeline(registry, "Qwen/Qwen3-32B", "").pipeline->model_type, "qwen3");
  EXPECT_EQ(resolve_pipeline(registry, "/models/Qwen3-TTS-12Hz-1.7B-VoiceDesign/", "").pipeline->model_type,
            "qwen3_tts");
}

TEST(PipelineResolutionTest, UnknownModelListsRegisteredPipelines) {
  std::string message =
      error_message([] { resolve_pipeline(real_registry(), "acme/unknown-model", ""); }, ErrorCode::kNotFound);
  EXPECT_NE(message.find("no pipeline for model 'acme/unknown-model'"), std::string::npos) << message;
  EXPECT_NE(message.find("qwen2_5_omni, qwen3, qwen3_omni_moe, qwen3_omni_moe_thinker_only, qwen3_tts"),
            std::string::npos)
      << message;
}

TEST(PipelineResolutionTest, UnreadableConfigJsonIsALoadError) {
  omni::testing::TempDir dir;
  dir.write("m/config.json", "{ not json");
  std::string message = error_message([&] { resolve_pipeline(real_registry(), (dir.path() / "m").string(), ""); },
                                      ErrorCode::kLoadFailed);
  EXPECT_NE(message.find("config.json"), std::string::npos) << message;
}

}  // namespace
}  // namespace omni::config
