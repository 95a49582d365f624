#include "model/hf_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "model/model_registry.h"
#include "model/random_checkpoint.h"

namespace omni::model {
namespace {

namespace fs = std::filesystem;
const fs::path kData = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen";

TEST(HfConfigTest, ReadsTransformers5Schema) {
  TextModelConfig c = read_text_model_config(kData / "qwen3_mqa_untied_bf16_v5_sliding");
  EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c.vocab_size, 300);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 1);
  EXPECT_EQ(c.head_dim, 12);
  EXPECT_EQ(c.rope.theta, 5e5f);
  EXPECT_EQ(c.dtype, "bfloat16");
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.sliding_window, (std::vector<int>{0, 6}));
}

TEST(HfConfigTest, ReadsTransformers4SchemaAndDerivesSlidingLayers) {
  TextModelConfig c = read_text_model_config(kData / "qwen2_gqa2_untied_bf16_v4_sliding");
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(c.head_dim, 16);  // hidden / heads: Qwen2 configs have no head_dim
  EXPECT_EQ(c.rope.theta, 1e6f);
  EXPECT_EQ(c.dtype, "bfloat16");  // from torch_dtype
  EXPECT_EQ(c.sliding_window, (std::vector<int>{0, 7}));
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{399}));
}

Json base_config() {
  return Json::parse(R"({"architectures":["Qwen3ForCausalLM"],"vocab_size":10,"hidden_size":8,
    "num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,"intermediate_size":16,
    "rope_theta":1000.0,"sliding_window":4096,"use_sliding_window":false,"max_window_layers":1})");
}

TEST(HfConfigTest, SlidingWindowIsOffUnlessEnabled) {
  EXPECT_EQ(parse_text_model_config(base_config(), "c").sliding_window, (std::vector<int>{0, 0}));
}

TEST(HfConfigTest, MropeSectionsAreReadFromEitherSchema) {
  Json v4 = base_config();
  v4["head_dim"] = 16;
  v4["rope_scaling"] = Json::parse(R"({"type":"mrope","mrope_section":[2,3,3]})");
  RopeConfig r = parse_text_model_config(v4, "c").rope;
  EXPECT_EQ(r.mrope_section, (std::vector<int>{2, 3, 3}));
  EXPECT_FALSE(r.mrope_interleaved);
  Json v5 = base_config();
  v5["head_dim"] = 16;
  v5.erase("rope_theta");
  v5["rope_parameters"] =
      Json::parse(R"({"rope_type":"default","rope_theta":5.0,"mrope_section":[4,2,2],"mrope_interleaved":true})");
  r = parse_text_model_config(v5, "c").rope;
  EXPECT_EQ(r.theta, 5.0f);
  EXPECT_TRUE(r.mrope_interleaved);
}

TEST(HfConfigTest, MoeFieldsGiveTheExpertsAndWhichLayersAreSparse) {
  Json c = base_config();
  EXPECT_EQ(parse_text_model_config(c, "c").moe.num_experts, 0);
  EXPECT_FALSE(parse_text_model_config(c, "c").moe.sparse(0));
  c["num_hidden_layers"] = 4;
  c["num_experts"] = 8;
  c["num_experts_per_tok"] = 2;
  c["moe_intermediate_size"] = 12;
  c["norm_topk_prob"] = true;
  c["mlp_only_layers"] = {2};
  MoeConfig moe = parse_text_model_config(c, "c").moe;
  EXPECT_EQ(moe.num_experts, 8);
  EXPECT_EQ(moe.num_experts_per_tok, 2);
  EXPECT_EQ(moe.moe_intermediate_size, 12);
  EXPECT_TRUE(moe.norm_topk_prob);
  EXPECT_EQ(moe.sparse_layers, (std::vector<bool>{true, true, false, true}));
  EXPECT_EQ(moe.shared_expert_intermediate_size, 0);  // no shared expert unless the config has one
  c["shared_expert_intermediate_size"] = 24;
  EXPECT_EQ(parse_text_model_config(c, "c").moe.shared_expert_intermediate_size, 24);
  c["shared_expert_intermediate_size"] = -1;
  try {
    parse_text_model_config(c, "/m/config.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "/m/config.json: field 'shared_expert_intermediate_size' must not be negative");
  }
  c.erase("shared_expert_intermediate_size");
  c["decoder_sparse_step"] = 2;
  c["mlp_only_layers"] = Json::array();
  EXPECT_EQ(parse_text_model_config(c, "c").moe.sparse_layers, (std::vector<bool>{false, true, false, true}));
  // Every layer sparse: the dense intermediate_size may be absent.
  c["decoder_sparse_step"] = 1;
  c.erase("intermediate_size");
  EXPECT_EQ(parse_text_model_config(c, "c").intermediate_size, 0);
  c["num_experts_per_tok"] = 9;
  try {
    parse_text_model_config(c, "/m/config.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "/m/config.json: num_experts_per_tok 9 is more than the 8 experts");
  }
  c["num_experts_per_tok"] = 2;
  c["mlp_only_layers"] = {4};
  try {
    parse_text_model_config(c, "/m/config.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "/m/config.json: mlp_only_layers names layer 4, the model has 4");
  }
}

TEST(HfConfigTest, ErrorsNameTheSourceAndTheField) {
  auto error_of = [](const Json& j) {
    try {
      parse_text_model_config(j, "/m/config.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Json missing = base_config();
  missing.erase("hidden_size");
  EXPECT_EQ(error_of(missing), "/m/config.json: missing field 'hidden_size'");
  // Found by the hf_config fuzzer: an integer field holding a float beyond int's range was
  // converted by nlohmann (undefined behaviour); a fraction was truncated.
  for (const Json& value : {Json(8.0066e32), Json(3.5), Json(int64_t{1} << 40)}) {
    Json huge = base_config();
    huge["vocab_size"] = value;
    EXPECT_EQ(error_of(huge), "/m/config.json: field 'vocab_size' has the wrong type (got " + value.dump() + ")");
  }
  Json whole = base_config();
  whole["vocab_size"] = 320.0;  // a whole number written as a float is the integer
  EXPECT_EQ(parse_text_model_config(whole, "c").vocab_size, 320);
  Json wrong = base_config();
  wrong["vocab_size"] = "ten";
  EXPECT_EQ(error_of(wrong), "/m/config.json: field 'vocab_size' has the wrong type (got \"ten\")");
  Json gqa = base_config();
  gqa["num_key_value_heads"] = 3;
  EXPECT_EQ(error_of(gqa), "/m/config.json: num_attention_heads 2 is not a multiple of num_key_value_heads 3");
  Json yarn = base_config();
  yarn["rope_scaling"] = Json::parse(R"({"rope_type":"yarn","factor":4.0})");
  EXPECT_EQ(error_of(yarn), "/m/config.json: rope_scaling.rope_type 'yarn' is not supported (default, mrope)");
}

TEST(GenerationDefaultsTest, ReadsEosListAndSamplingDefaults) {
  GenerationDefaults d = read_generation_defaults(kData / "qwen3_gqa2_tied_bf16_v5");
  EXPECT_EQ(d.eos_token_ids, (std::vector<int32_t>{383, 382}));
  EXPECT_EQ(d.do_sample, true);
  EXPECT_FLOAT_EQ(*d.temperature, 0.7f);
  EXPECT_FLOAT_EQ(*d.top_p, 0.8f);
  EXPECT_EQ(*d.top_k, 20);
  EXPECT_FALSE(d.max_new_tokens.has_value());
  EXPECT_TRUE(read_generation_defaults(fs::temp_directory_path() / "no_such_model").eos_token_ids.empty());
}

TEST(ModelRegistryTest, BuiltinFamiliesServeQwen2AndQwen3) {
  const ModelRegistry& r = builtin_model_registry();
  EXPECT_TRUE(r.has_causal_lm("Qwen3ForCausalLM"));
  EXPECT_TRUE(r.has_causal_lm("Qwen2ForCausalLM"));
}

TEST(ModelRegistryTest, UnknownArchitectureListsTheSupportedOnes) {
  ModelRegistry r;
  r.add_causal_lm(
      "Qwen3ForCausalLM",
      [](const fs::path&, const Json&, const CausalLmLoadOptions&) -> std::unique_ptr<CausalLm> { return {}; });
  EXPECT_THROW(r.add_causal_lm("Qwen3ForCausalLM", {}), Error);
  const fs::path dir = fs::temp_directory_path() / ("omni_registry_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures":["LlamaForCausalLM"]})";
  try {
    r.create_causal_lm(dir);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("architecture 'LlamaForCausalLM' is not supported (supported: "
                                         "Qwen3ForCausalLM)"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

TEST(ModelRegistryTest, MissingTensorErrorNamesTheTensor) {
  const fs::path dir = fs::temp_directory_path() / ("omni_registry_missing_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(kData / "qwen3_gqa2_tied_bf16_v5/config.json", dir / "config.json");
  fs::copy_file(kData / "qwen3_mqa_untied_bf16_v5_sliding/model.safetensors", dir / "model.safetensors");
  try {
    builtin_model_registry().create_causal_lm(dir);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLoadFailed);
    EXPECT_NE(std::string(e.what()).find("tensor 'model.embed_tokens.weight' has shape [300, 32] in model.safetensors, "
                                         "expected [384, 64]"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

TEST(RandomCheckpointTest, WritesACheckpointOurLoaderServes) {
  const fs::path dir = fs::temp_directory_path() / ("omni_random_ckpt_" + std::to_string(::getpid()));
  TextModelConfig shapes = qwen3_0_6b_shapes();
  shapes.vocab_size = 97;
  shapes.hidden_size = 24;
  shapes.num_hidden_layers = 2;
  shapes.num_attention_heads = 3;
  shapes.num_key_value_heads = 1;
  shapes.head_dim = 10;
  shapes.intermediate_size = 40;
  shapes.eos_token_ids = {96};
  write_random_qwen3_checkpoint(dir, shapes, 5, tensor::DType::kBF16);
  const TextModelConfig back = read_text_model_config(dir);
  EXPECT_EQ(back.head_dim, 10);
  EXPECT_TRUE(back.tie_word_embeddings);
  EXPECT_EQ(back.dtype, "bfloat16");
  std::unique_ptr<CausalLm> lm = builtin_model_registry().create_causal_lm(dir);
  EXPECT_EQ(lm->info().eos_token_ids, (std::vector<int32_t>{96}));
  lm->init_kv_cache(1);
  std::vector<float> logits;
  lm->forward(ForwardBatch{{1, 2, 3}, {0, 1, 2}, {SequenceSlice{0, 3, 0, {0}, true}}, false}, logits);
  ASSERT_EQ(logits.size(), 97u);
  float spread = 0.0f;
  for (float v : logits) {
    EXPECT_TRUE(std::isfinite(v));
    spread = std::max(spread, std::abs(v - logits[0]));
  }
  EXPECT_GT(spread, 0.0f);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace omni::model
