// The stage-model registry: what the families register, what every registered pipeline names,
// loading a registered streaming decoder by name, and the Qwen3-TTS checkpoint's description.
#include "model/stage_model_registry.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "config/pipeline_registry.h"
#include "model/model_registry.h"
#include "model/pipelines.h"
#include "model/qwen3_tts/codec_frames.h"
#include "model/qwen3_tts/random_codec.h"
#include "model/qwen3_tts/stage_models.h"
#include "support/temp_dir.h"

namespace omni::model {
namespace {

using config::ExecutionType;

TEST(StageModelRegistryTest, FamiliesRegisterTheirStageModelsByExecutionType) {
  const StageModels& models = builtin_stage_models();
  EXPECT_TRUE(models.has(ExecutionType::kLlmAr, "causal_lm"));
  EXPECT_TRUE(models.has(ExecutionType::kLlmGeneration, "qwen3_tts_code2wav"));
  // A name is registered for one execution type only.
  EXPECT_FALSE(models.has(ExecutionType::kLlmGeneration, "causal_lm"));
  EXPECT_FALSE(models.has(ExecutionType::kLlmAr, "qwen3_tts_code2wav"));
  EXPECT_FALSE(models.has(ExecutionType::kDiffusion, "causal_lm"));
  EXPECT_EQ(models.names(ExecutionType::kLlmGeneration),
            (std::vector<std::string>{"qwen3_omni_code2wav", "qwen3_tts_code2wav"}));
  EXPECT_EQ(models.names(ExecutionType::kDiffusion), (std::vector<std::string>{"z_image"}));
  EXPECT_FALSE(models.has(ExecutionType::kLlmAr, "z_image"));

  StageModels mine;
  mine.generation.add("decoder", [](const StageModelArgs&) { return nullptr; });
  try {
    mine.generation.add("decoder", [](const StageModelArgs&) { return nullptr; });
    FAIL() << "a second registration was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_NE(std::string(e.what()).find("'decoder' registered twice"), std::string::npos) << e.what();
  }
}

TEST(StageModelRegistryTest, EveryPipelineStageNamesAStageModel) {
  config::PipelineRegistry pipelines;
  register_all_pipelines(pipelines);
  const StageModels& models = builtin_stage_models();
  std::set<std::string> registered;
  for (const std::string& name : pipelines.names()) {
    for (const config::StagePipelineConfig& stage : pipelines.get(name).stages) {
      EXPECT_FALSE(stage.stage_model.empty()) << name << " stage " << stage.stage_id;
      if (models.has(stage.execution_type, stage.stage_model)) registered.insert(stage.stage_model);
    }
  }
  // Of the Omni stages Qwen3-Omni's three are built (Qwen2.5-Omni's are not).
  EXPECT_EQ(registered,
            (std::set<std::string>{"causal_lm", "qwen3_omni_code2wav", "qwen3_omni_talker", "qwen3_omni_thinker",
                                   "qwen3_tts_code2wav", "qwen3_tts_talker", "z_image"}));
}

TEST(StageModelRegistryTest, LoadsARegisteredDecoderByNameAndNamesUnknownOnes) {
  testing::TempDir dir;
  qwen3_tts::CodecDecoderConfig shapes = qwen3_tts::small_codec_shapes();
  shapes.num_hidden_layers = 1;
  qwen3_tts::write_random_codec_checkpoint(dir.path() / "speech_tokenizer", shapes, 3);
  StageModelArgs args;
  args.model_dir = dir.path();
  args.stage_id = 1;
  std::unique_ptr<StreamingDecoderStage> stage = builtin_stage_models().create_generation("qwen3_tts_code2wav", args);
  EXPECT_EQ(stage->decoder().codes_per_frame(), 16);
  EXPECT_EQ(stage->decoder().sample_rate(), 24000);
  const std::vector<int32_t> codes = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  EXPECT_EQ(stage->payload_codes(qwen3_tts::encode_codec_frames(codes, 16)), codes);
  EXPECT_THROW(stage->payload_codes(std::vector<uint8_t>(10)), Error);
  try {
    builtin_stage_models().create_generation("vocoder", args);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_NE(std::string(e.what()).find(
                  "stage 1: no llm_generation stage model 'vocoder' is registered (registered: qwen3_omni_code2wav, "
                  "qwen3_tts_code2wav)"),
              std::string::npos)
        << e.what();
  }
}

TEST(StageModelRegistryTest, CausalLmLoadsTheCheckpointsArchitecture) {
  StageModelArgs args;
  args.model_dir = std::string(OMNI_SOURCE_DIR) + "/tests/data/tiny_qwen/qwen3_mha_untied_f32_v4";
  std::unique_ptr<ArStageModel> lm = builtin_stage_models().create_ar("causal_lm", args);
  std::unique_ptr<CausalLm> direct = builtin_model_registry().create_causal_lm(args.model_dir);
  EXPECT_EQ(lm->info().vocab_size, direct->info().vocab_size);
  EXPECT_EQ(lm->kv_bytes_per_block(), direct->kv_bytes_per_block());
  EXPECT_GT(lm->info().vocab_size, 0);
}

TEST(ModelFactsTest, MergeUnionsNamesAndKeepsTheFirstSampleRate) {
  ModelFacts facts{{"b"}, {"Base"}, 0};
  facts.merge({{"a", "b"}, {}, 24000});
  facts.merge({{"c"}, {"Base"}, 16000});
  EXPECT_EQ(facts, (ModelFacts{{"a", "b", "c"}, {"Base"}, 24000}));
}

TEST(Qwen3TtsDescribeTest, TheCheckpointTellsItsVoicesTaskAndSampleRate) {
  testing::TempDir dir;
  EXPECT_EQ(qwen3_tts::describe_checkpoint(dir.path()), ModelFacts{});
  dir.write("config.json", R"({"tts_model_type": "custom_voice",
                               "talker_config": {"spk_id": {"Vivian": 3065, "aiden": 2861}}})");
  EXPECT_EQ(qwen3_tts::describe_checkpoint(dir.path()), (ModelFacts{{"Vivian", "aiden"}, {"CustomVoice"}, 0}));
  qwen3_tts::CodecDecoderConfig shapes = qwen3_tts::small_codec_shapes();
  shapes.output_sample_rate = 16000;
  qwen3_tts::write_random_codec_checkpoint(dir.path() / "speech_tokenizer", shapes, 3);
  EXPECT_EQ(qwen3_tts::describe_checkpoint(dir.path()).audio_sample_rate, 16000);
  dir.write("config.json", R"({"tts_model_type": "voice_design"})");
  EXPECT_EQ(qwen3_tts::describe_checkpoint(dir.path()).task_types, (std::vector<std::string>{"VoiceDesign"}));
  dir.write("config.json", R"({"tts_model_type": "Base"})");
  EXPECT_EQ(qwen3_tts::describe_checkpoint(dir.path()).task_types, (std::vector<std::string>{"Base"}));
  // The registry hands out the same description for the family's stage model.
  EXPECT_EQ(builtin_stage_models().describe(ExecutionType::kLlmGeneration, "qwen3_tts_code2wav", dir.path()),
            qwen3_tts::describe_checkpoint(dir.path()));
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {R"({"tts_model_type": "clone"})", "tts_model_type \"clone\" is not one of custom_voice"},
           {R"({"talker_config": {"spk_id": [1]}})", "talker_config.spk_id must be an object"},
           {"{", "malformed JSON"}}) {
    dir.write("config.json", text);
    try {
      qwen3_tts::describe_checkpoint(dir.path());
      ADD_FAILURE() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kLoadFailed);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace omni::model
