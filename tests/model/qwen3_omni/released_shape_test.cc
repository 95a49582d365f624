// bench/shapes/qwen3-omni-30b-a3b: the released Qwen3-Omni-30B-A3B-Instruct's config.json and
// preprocessor_config.json, which `omnistage serve --load-format dummy` serves with random weights
// made on the GPU (scripts/gpu/run_omni_speech_bench_on_gpu.sh). Without loading 35 B parameters,
// this reads the folder as serve does before it loads anything: the pipeline it resolves to, the
// facts each stage model reports to the server, and every config the three stages parse, with the
// released values (docs/models/qwen3_omni.md).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/json.h"
#include "config/pipeline_registry.h"
#include "model/hf_config.h"
#include "model/pipelines.h"
#include "model/qwen3_omni/audio_encoder.h"
#include "model/qwen3_omni/code2wav.h"
#include "model/qwen3_omni/talker_config.h"
#include "model/qwen3_omni/talker_stage_model.h"
#include "model/qwen3_omni/thinker.h"
#include "model/qwen3_omni/thinker_prompt.h"
#include "model/qwen3_omni/vision_encoder.h"
#include "model/stage_model_registry.h"

namespace omni::model::qwen3_omni {
namespace {

namespace fs = std::filesystem;

const fs::path kShape = fs::path(OMNI_SOURCE_DIR) / "bench/shapes/qwen3-omni-30b-a3b";

Json shape_config() { return read_json_file(kShape / "config.json"); }

TEST(Qwen3OmniReleasedShapeTest, ResolvesToTheThreeStagePipeline) {
  config::PipelineRegistry registry;
  register_all_pipelines(registry);
  const config::PipelineResolution r = config::resolve_pipeline(registry, kShape.string(), "");
  ASSERT_NE(r.pipeline, nullptr);
  EXPECT_EQ(r.pipeline->model_type, "qwen3_omni_moe");
  ASSERT_EQ(r.pipeline->stages.size(), 3u);
  EXPECT_EQ(r.pipeline->stages[1].stage_model, kTalkerStageModel);
  EXPECT_EQ(r.pipeline->stages[2].stage_model, kCode2WavStageModel);
}

TEST(Qwen3OmniReleasedShapeTest, EachStageModelDescribesItToTheServer) {
  const StageModels& models = builtin_stage_models();
  const ModelFacts thinker = models.describe(config::ExecutionType::kLlmAr, kThinkerStageModel, kShape);
  EXPECT_EQ(thinker.audio_input_sample_rate, 16000);
  EXPECT_TRUE(thinker.image_input);
  EXPECT_TRUE(thinker.video_input);
  const ModelFacts talker = models.describe(config::ExecutionType::kLlmAr, kTalkerStageModel, kShape);
  EXPECT_EQ(talker.voices, (std::vector<std::string>{"aiden", "chelsie", "ethan"}));
  const ModelFacts code2wav = models.describe(config::ExecutionType::kLlmGeneration, kCode2WavStageModel, kShape);
  EXPECT_EQ(code2wav.audio_sample_rate, 24000);
}

TEST(Qwen3OmniReleasedShapeTest, TheThinkerIsTheReleasedOne) {
  const Json config = shape_config();
  const TextModelConfig text = parse_thinker_text_config(config, "config.json");
  EXPECT_EQ(text.vocab_size, 152064);
  EXPECT_EQ(text.hidden_size, 2048);
  EXPECT_EQ(text.num_hidden_layers, 48);
  EXPECT_EQ(text.moe.num_experts, 128);
  EXPECT_EQ(text.moe.num_experts_per_tok, 8);
  EXPECT_EQ(text.moe.moe_intermediate_size, 768);
  EXPECT_EQ(text.moe.shared_expert_intermediate_size, 0);
  EXPECT_EQ(text.rope.mrope_section, (std::vector<int>{24, 20, 20}));
  const ThinkerTokenIds ids = parse_thinker_token_ids(config, "config.json");
  EXPECT_EQ(ids.audio_token, 151675);
  EXPECT_EQ(ids.position_id_per_seconds, 13.0);
  const AudioEncoderConfig audio = parse_audio_encoder_config(config["thinker_config"]["audio_config"], "audio_config");
  EXPECT_EQ(audio.encoder_layers, 32);
  EXPECT_EQ(audio.output_dim, 2048);
  const VisionEncoderConfig vision =
      parse_vision_encoder_config(config["thinker_config"]["vision_config"], "vision_config");
  EXPECT_EQ(vision.depth, 27);
  EXPECT_EQ(vision.deepstack_visual_indexes, (std::vector<int>{8, 16, 24}));
}

TEST(Qwen3OmniReleasedShapeTest, TheTalkerIsTheReleasedOne) {
  const TalkerConfig c = read_talker_config(kShape);
  const TextModelConfig& stack = c.talker.talker;
  EXPECT_EQ(stack.vocab_size, 3072);
  EXPECT_EQ(stack.hidden_size, 1024);
  EXPECT_EQ(stack.num_hidden_layers, 20);
  EXPECT_EQ(stack.num_attention_heads, 16);
  EXPECT_EQ(stack.num_key_value_heads, 2);
  EXPECT_EQ(stack.head_dim, 128);
  EXPECT_EQ(stack.moe.num_experts, 128);
  EXPECT_EQ(stack.moe.num_experts_per_tok, 6);
  EXPECT_EQ(stack.moe.moe_intermediate_size, 384);
  EXPECT_EQ(stack.moe.shared_expert_intermediate_size, 768);
  EXPECT_TRUE(stack.moe.norm_topk_prob);
  EXPECT_TRUE(stack.moe.sparse(0) && stack.moe.sparse(19));
  EXPECT_EQ(stack.rope.mrope_section, (std::vector<int>{24, 20, 20}));
  EXPECT_TRUE(stack.rope.mrope_interleaved);
  EXPECT_FLOAT_EQ(stack.rope.theta, 1e6f);
  const TextModelConfig& predictor = c.talker.code_predictor;
  EXPECT_EQ(predictor.vocab_size, 2048);
  EXPECT_EQ(predictor.hidden_size, 1024);
  EXPECT_EQ(predictor.num_hidden_layers, 5);
  EXPECT_EQ(predictor.num_key_value_heads, 8);
  EXPECT_EQ(predictor.intermediate_size, 3072);
  EXPECT_EQ(predictor.moe.num_experts, 0);
  EXPECT_EQ(c.talker.text_hidden_size, 2048);
  EXPECT_EQ(c.talker.projection_size, 2048);
  EXPECT_EQ(c.talker.num_code_groups, 16);
  EXPECT_EQ(c.accept_hidden_layer, 24);
  EXPECT_EQ(c.talker.codec_eos_id, 2150);
  EXPECT_EQ(c.talker.codec_nothink_id, 2155);
  EXPECT_EQ(c.talker.speaker_id("Ethan"), 2302);
  EXPECT_EQ(c.talker.tts_pad_token_id, 151671);
  EXPECT_EQ(c.talker.tts_bos_token_id, 151672);
  EXPECT_EQ(c.talker.tts_eos_token_id, 151673);
  EXPECT_EQ(c.talker.assistant_token_id, 77091);
}

TEST(Qwen3OmniReleasedShapeTest, Code2WavIsTheReleasedOne) {
  const qwen3_tts::CodecDecoderConfig c = parse_code2wav_config(shape_config(), "config.json");
  EXPECT_EQ(c.codebook_size, 2048);
  EXPECT_EQ(c.num_quantizers, 16);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.latent_dim, 1024);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.num_hidden_layers, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.sliding_window, 72);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.decoder_dim, 1536);
  EXPECT_EQ(c.samples_per_frame(), 1920);
  EXPECT_EQ(c.output_sample_rate, 24000);
}

}  // namespace
}  // namespace omni::model::qwen3_omni
