#include "config/effective_config.h"

#include <gtest/gtest.h>

#include "config/config_report.h"
#include "config_test_util.h"
#include "support/temp_dir.h"

namespace omni::config {
namespace {

using omni::testing::TempDir;
using testing::environment;
using testing::error_message;
using testing::real_registry;
using testing::source;
using testing::stage;

constexpr const char* kOmni = "Qwen/Qwen3-Omni-30B-A3B-Instruct";

CliConfigInputs cli(const std::string& model, const std::string& deploy = "") {
  CliConfigInputs inputs;
  inputs.model = model;
  inputs.deploy_config = deploy;
  return inputs;
}

void add_flag(CliConfigInputs& inputs, const std::string& field, const OrderedJson& value, const std::string& flag) {
  inputs.engine_args[field] = value;
  inputs.flag_names[field] = flag;
}

// The spec's worked override example: bundled base + user overlay + --max-model-len + --stage-overrides.
TEST(EffectiveConfigTest, SpecWorkedExample) {
  TempDir dir;
  auto base = dir.write("vllm_omni/deploy/qwen3_omni_moe.yaml", R"(
async_chunk: true
stages:
  - stage_id: 0
    gpu_memory_utilization: 0.9
    max_num_seqs: 32
  - stage_id: 1
    gpu_memory_utilization: 0.7
    max_num_seqs: 16
)");
  auto overlay = dir.write("home/my_overrides.yaml", R"(
base_config: ../vllm_omni/deploy/qwen3_omni_moe.yaml
stages:
  - stage_id: 1
    gpu_memory_utilization: 0.5     # smaller GPU
)");
  CliConfigInputs inputs = cli(kOmni, overlay.string());
  add_flag(inputs, "max_model_len", 16384, "--max-model-len");
  inputs.stage_overrides = R"({"0": {"max_num_seqs": 8}})";
  EffectiveConfig config = build_effective_config(real_registry(), inputs, environment());

  EXPECT_EQ(config.pipeline->model_type, "qwen3_omni_moe");
  EXPECT_TRUE(config.async_chunk);
  const EffectiveStage& s0 = stage(config, 0);
  const EffectiveStage& s1 = stage(config, 1);
  EXPECT_EQ(s0.engine_args["max_num_seqs"], 8);
  EXPECT_EQ(source(s0, "max_num_seqs"), "stage-override");
  EXPECT_EQ(s0.engine_args["gpu_memory_utilization"], 0.9);
  EXPECT_EQ(source(s0, "gpu_memory_utilization"), "deploy:" + base.string());
  EXPECT_EQ(s1.engine_args["gpu_memory_utilization"], 0.5);
  EXPECT_EQ(source(s1, "gpu_memory_utilization"), "deploy:" + overlay.string());
  EXPECT_EQ(s1.engine_args["max_num_seqs"], 16);
  EXPECT_EQ(source(s1, "max_num_seqs"), "deploy:" + base.string());
  for (const auto& s : config.stages) {
    EXPECT_EQ(s.engine_args["max_model_len"], 16384);
    EXPECT_EQ(source(s, "max_model_len"), "cli");
  }
  EXPECT_EQ(stage(config, 2).engine_args["gpu_memory_utilization"], 0.9);
  EXPECT_EQ(source(stage(config, 2), "gpu_memory_utilization"), "default");
}

TEST(EffectiveConfigTest, WorkedExampleOverTheBundledYaml) {
  TempDir dir;
  auto overlay = dir.write("my_overrides.yaml", "base_config: " + std::string(OMNI_SOURCE_DIR) +
                                                    "/deploy/qwen3_omni_moe.yaml\n"
                                                    "stages:\n  - stage_id: 1\n    gpu_memory_utilization: 0.5\n");
  CliConfigInputs inputs = cli(kOmni, overlay.string());
  add_flag(inputs, "max_model_len", 16384, "--max-model-len");
  inputs.stage_overrides = R"({"0": {"max_num_seqs": 8}})";
  EffectiveConfig config = build_effective_config(real_registry(), inputs, environment("cuda"));
  EXPECT_EQ(stage(config, 0).engine_args["max_num_seqs"], 8);
  EXPECT_EQ(stage(config, 0).engine_args["gpu_memory_utilization"], 0.9);
  EXPECT_EQ(stage(config, 1).engine_args["gpu_memory_utilization"], 0.5);
  EXPECT_EQ(stage(config, 1).engine_args["max_num_seqs"], 64);
  EXPECT_EQ(stage(config, 2).engine_args["max_model_len"], 16384);
  EXPECT_EQ(stage(config, 1).input_connectors.at("from_stage_0"), "connector_of_shared_memory");
  EXPECT_EQ(stage(config, 0).output_connectors.at("to_stage_1"), "connector_of_shared_memory");
  EXPECT_EQ(stage(config, 1).default_sampling_params["stop_token_ids"], OrderedJson::parse("[2150]"));
  EXPECT_EQ(source(stage(config, 1), "default_sampling_params.stop_token_ids"), "pipeline");
}

// One deploy file with a base, an overlay and a platform section, so each precedence pair can
// be checked by removing the layer above it.
class PrecedenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = dir_.write("base.yaml", R"(
stages:
  - stage_id: 0
    max_num_seqs: 10
    max_num_batched_tokens: 100
    max_model_len: 1000
    gpu_memory_utilization: 0.10
    devices: "0"
platforms:
  cpu:
    stages:
      - {stage_id: 0, max_num_seqs: 30, max_num_batched_tokens: 300}
)");
    overlay_ = dir_.write("overlay.yaml", R"(
base_config: base.yaml
stages:
  - {stage_id: 0, max_num_seqs: 20, max_num_batched_tokens: 200, max_model_len: 2000}
)");
  }
  EffectiveConfig build(const CliConfigInputs& inputs, const std::string& platform) {
    return build_effective_config(real_registry(), inputs, environment(platform));
  }
  TempDir dir_;
  std::filesystem::path base_, overlay_;
};

TEST_F(PrecedenceTest, BaseBeatsDefault) {
  const EffectiveConfig config = build(cli("Qwen/Qwen3-8B", base_.string()), "cuda");
  const EffectiveStage& s = stage(config, 0);
  EXPECT_EQ(s.engine_args["gpu_memory_utilization"], 0.10);
  EXPECT_EQ(source(s, "gpu_memory_utilization"), "deploy:" + base_.string());
  EXPECT_EQ(s.engine_args["dtype"], "auto");
  EXPECT_EQ(source(s, "dtype"), "default");
}

TEST_F(PrecedenceTest, OverlayBeatsBase) {
  const EffectiveConfig config = build(cli("Qwen/Qwen3-8B", overlay_.string()), "cuda");
  const EffectiveStage& s = stage(config, 0);
  EXPECT_EQ(s.engine_args["max_model_len"], 2000);
  EXPECT_EQ(source(s, "max_model_len"), "deploy:" + overlay_.string());
  EXPECT_EQ(s.engine_args["gpu_memory_utilization"], 0.10);
}

TEST_F(PrecedenceTest, PlatformBeatsOverlay) {
  const EffectiveConfig config = build(cli("Qwen/Qwen3-8B", overlay_.string()), "cpu");
  const EffectiveStage& s = stage(config, 0);
  EXPECT_EQ(s.engine_args["max_num_seqs"], 30);
  EXPECT_EQ(source(s, "max_num_seqs"), "platform:cpu");
  EXPECT_EQ(s.engine_args["max_model_len"], 2000);
}

TEST_F(PrecedenceTest, CliBeatsPlatform) {
  CliConfigInputs inputs = cli("Qwen/Qwen3-8B", overlay_.string());
  add_flag(inputs, "max_num_batched_tokens", 400, "--max-num-batched-tokens");
  const EffectiveConfig config = build(inputs, "cpu");
  const EffectiveStage& s = stage(config, 0);
  EXPECT_EQ(s.engine_args["max_num_batched_tokens"], 400);
  EXPECT_EQ(source(s, "max_num_batched_tokens"), "cli");
  EXPECT_EQ(s.sources.at("max_num_batched_tokens").explain(), "cli (--max-num-batched-tokens)");
  EXPECT_EQ(s.engine_args["max_num_seqs"], 30);
}

TEST_F(PrecedenceTest, StageOverrideBeatsCli) {
  CliConfigInputs inputs = cli("Qwen/Qwen3-8B", overlay_.string());
  add_flag(inputs, "max_num_seqs", 40, "--max-num-seqs");
  inputs.stage_overrides = R"({"0": {"max_num_seqs": 50, "devices": "1"}})";
  const EffectiveConfig config = build(inputs, "cpu");
  const EffectiveStage& s = stage(config, 0);
  EXPECT_EQ(s.engine_args["max_num_seqs"], 50);
  EXPECT_EQ(source(s, "max_num_seqs"), "stage-override");
  EXPECT_EQ(s.devices, "1");
  EXPECT_EQ(source(s, "devices"), "stage-override");
}

TEST_F(PrecedenceTest, FlagsTheUserDidNotTypeNeverOverrideYaml) {
  // The CLI layer carries only typed flags: an empty one leaves every YAML value in force.
  const EffectiveConfig config = build(cli("Qwen/Qwen3-8B", base_.string()), "cuda");
  const EffectiveStage& s = stage(config, 0);
  EXPECT_EQ(s.engine_args["max_num_seqs"], 10);
  EXPECT_EQ(source(s, "max_num_seqs"), "deploy:" + base_.string());
}

TEST(EffectiveConfigTest, PipelineWideFieldsApplyToEveryStageAndStageFieldsAndExtrasWin) {
  TempDir dir;
  auto file = dir.write("d.yaml", R"(
async_chunk: false
dtype: bfloat16
enable_prefix_caching: false
stages:
  - stage_id: 0
    dtype: float16
  - stage_id: 1
    max_num_seqs: 4
    engine_extras: {max_num_seqs: 2, kv_cache_memory_bytes: 1024}
)");
  EffectiveConfig config =
      build_effective_config(real_registry(), cli("Qwen/Qwen3-TTS-12Hz-1.7B-Base", file.string()), environment());
  const EffectiveStage& s0 = stage(config, 0);
  const EffectiveStage& s1 = stage(config, 1);
  EXPECT_EQ(s0.engine_args["dtype"], "float16");  // per-stage value (an extra) beats pipeline-wide
  EXPECT_EQ(s1.engine_args["dtype"], "bfloat16");
  EXPECT_EQ(source(s1, "dtype"), "deploy:" + file.string());
  EXPECT_EQ(s0.engine_args["enable_prefix_caching"], false);
  EXPECT_EQ(s1.engine_args["enable_prefix_caching"], false);
  EXPECT_EQ(s1.engine_args["max_num_seqs"], 2);  // extras win over typed fields
  EXPECT_EQ(s1.engine_args["kv_cache_memory_bytes"], 1024);
  EXPECT_EQ(s1.engine_extras, OrderedJson::parse(R"({"max_num_seqs": 2, "kv_cache_memory_bytes": 1024})"));
  EXPECT_FALSE(config.async_chunk);
  EXPECT_EQ(s1.engine_args["async_chunk"], false);
}

TEST(EffectiveConfigTest, DefaultSamplingParamsFlagGoesToItsStage) {
  CliConfigInputs inputs = cli("Tongyi-MAI/Z-Image-Turbo");
  add_flag(inputs, "default_sampling_params", OrderedJson::parse(R"({"0": {"num_inference_steps": 8, "guidance_scale": 0}})"),
           "--default-sampling-params");
  add_flag(inputs, "step_execution", true, "--step-execution");
  EffectiveConfig config = build_effective_config(real_registry(), inputs, environment());
  EXPECT_EQ(config.pipeline->model_type, "z_image");
  const EffectiveStage& s0 = stage(config, 0);
  EXPECT_EQ(s0.default_sampling_params["num_inference_steps"], 8);
  EXPECT_EQ(s0.default_sampling_params["guidance_scale"], 0);
  EXPECT_EQ(source(s0, "default_sampling_params.num_inference_steps"), "cli");
  EXPECT_FALSE(s0.engine_args.contains("default_sampling_params"));
  EXPECT_EQ(s0.engine_args["step_execution"], true);

  CliConfigInputs bad = cli("Tongyi-MAI/Z-Image-Turbo");
  add_flag(bad, "default_sampling_params", OrderedJson::parse(R"({"0": 3})"), "--default-sampling-params");
  EXPECT_THROW(build_effective_config(real_registry(), bad, environment()), Error);
}

TEST(EffectiveConfigTest, BundledDefaultLoadsWhenNoDeployConfigIsGiven) {
  EffectiveConfig config = build_effective_config(real_registry(), cli("Qwen/Qwen2.5-Omni-7B"), environment());
  ASSERT_EQ(config.deploy_files.size(), 1u);
  EXPECT_EQ(config.deploy_files[0], std::string(OMNI_SOURCE_DIR) + "/deploy/qwen2_5_omni.yaml");
  EXPECT_FALSE(config.async_chunk);
  EXPECT_EQ(stage(config, 1).default_sampling_params["stop_token_ids"], OrderedJson::parse("[8294]"));
  EXPECT_EQ(stage(config, 2).devices, "0");
  // No connectors in the YAML: every edge gets the automatic SharedMemoryConnector.
  ASSERT_EQ(config.connectors.count(kAutoConnectorName), 1u);
  EXPECT_EQ(config.connectors.at(kAutoConnectorName).name, "SharedMemoryConnector");
  EXPECT_EQ(stage(config, 2).input_connectors.at("from_stage_1"), kAutoConnectorName);
  EXPECT_EQ(stage(config, 1).output_connectors.at("to_stage_2"), kAutoConnectorName);
}

TEST(EffectiveConfigTest, SamplingConstraintsUnionStopTokens) {
  TempDir dir;
  auto file = dir.write("d.yaml", R"(
stages:
  - {stage_id: 1, default_sampling_params: {stop_token_ids: [7, 2150], detokenize: true, top_k: 3}}
)");
  EffectiveConfig config = build_effective_config(real_registry(), cli(kOmni, file.string()), environment());
  const EffectiveStage& talker = stage(config, 1);
  EXPECT_EQ(talker.default_sampling_params["stop_token_ids"], OrderedJson::parse("[7, 2150]"));
  EXPECT_EQ(talker.default_sampling_params["detokenize"], false);
  EXPECT_EQ(talker.default_sampling_params["top_k"], 3);
}

TEST(EffectiveConfigTest, ConnectorWiringErrorsNameStageAndConnector) {
  TempDir dir;
  auto undefined = dir.write("u.yaml", R"(
connectors: {shm: {name: SharedMemoryConnector}}
stages: [{stage_id: 1, input_connectors: {from_stage_0: mooncake}}]
)");
  std::string message =
      error_message([&] { build_effective_config(real_registry(), cli(kOmni, undefined.string()), environment()); },
                    ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("stage 1 (talker): input_connectors.from_stage_0 names connector 'mooncake', which is not "
                         "defined under connectors: (defined: shm)"),
            std::string::npos)
      << message;

  auto no_edge = dir.write("e.yaml", R"(
connectors: {shm: {name: SharedMemoryConnector}}
stages: [{stage_id: 2, input_connectors: {from_stage_0: shm}}]
)");
  message = error_message([&] { build_effective_config(real_registry(), cli(kOmni, no_edge.string()), environment()); },
                          ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("stage 2 (code2wav): input_connectors.from_stage_0: pipeline 'qwen3_omni_moe' has no edge"),
            std::string::npos)
      << message;

  auto conflict = dir.write("c.yaml", R"(
connectors: {a: {name: SharedMemoryConnector}, b: {name: MooncakeStoreConnector}}
stages:
  - {stage_id: 0, output_connectors: {to_stage_1: a}}
  - {stage_id: 1, input_connectors: {from_stage_0: b}}
)");
  message =
      error_message([&] { build_effective_config(real_registry(), cli(kOmni, conflict.string()), environment()); },
                    ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("edge 0 -> 1 is wired to two connectors"), std::string::npos) << message;
}

TEST(EffectiveConfigTest, DeployStageOutsideThePipelineIsRejected) {
  TempDir dir;
  auto file = dir.write("d.yaml", "stages: [{stage_id: 4, max_num_seqs: 1}]\n");
  std::string message = error_message(
      [&] { build_effective_config(real_registry(), cli("Qwen/Qwen3-8B", file.string()), environment()); },
      ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("stage 4 is not a stage of pipeline 'qwen3' (stages: 0)"), std::string::npos) << message;
}

TEST(EffectiveConfigTest, DeviceCountMustMatchTheLocalWorldSize) {
  TempDir dir;
  auto ok = dir.write("ok.yaml", R"(
data_parallel_size: 1
stages: [{stage_id: 0, devices: "0,1,2,3", tensor_parallel_size: 2, pipeline_parallel_size: 2}]
)");
  EXPECT_NO_THROW(build_effective_config(real_registry(), cli("Qwen/Qwen3-8B", ok.string()), environment()));

  auto bad = dir.write("bad.yaml", R"(stages: [{stage_id: 0, devices: "0,1,2", tensor_parallel_size: 2}])");
  std::string message =
      error_message([&] { build_effective_config(real_registry(), cli("Qwen/Qwen3-8B", bad.string()), environment()); },
                    ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("stage 0 (llm): devices \"0,1,2\" (3 devices) must match the local world size 2 = "
                         "tensor_parallel_size 2 x data_parallel_size 1 x pipeline_parallel_size 1"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("#5003"), std::string::npos) << message;

  auto letters = dir.write("letters.yaml", R"(stages: [{stage_id: 0, devices: "0,a"}])");
  message = error_message(
      [&] { build_effective_config(real_registry(), cli("Qwen/Qwen3-8B", letters.string()), environment()); },
      ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("'a' is not a device index"), std::string::npos) << message;
}

TEST(EffectiveConfigTest, ReplicaPoolsAndTemplates) {
  TempDir dir;
  auto pool = dir.write("pool.yaml",
                        R"(stages: [{stage_id: 0, devices: "0,1,2,3", num_replicas: 2, tensor_parallel_size: 2}])");
  EXPECT_NO_THROW(build_effective_config(real_registry(), cli("Qwen/Qwen3-8B", pool.string()), environment()));
  auto templ =
      dir.write("t.yaml", R"(stages: [{stage_id: 0, devices: "0,1", num_replicas: 3, tensor_parallel_size: 2}])");
  EXPECT_NO_THROW(build_effective_config(real_registry(), cli("Qwen/Qwen3-8B", templ.string()), environment()));
  auto bad_template =
      dir.write("bt.yaml", R"(stages: [{stage_id: 0, devices: "4,5", num_replicas: 3, tensor_parallel_size: 2}])");
  std::string message = error_message(
      [&] { build_effective_config(real_registry(), cli("Qwen/Qwen3-8B", bad_template.string()), environment()); },
      ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("is a template for 3 replicas, so its entries must be below 2"), std::string::npos) << message;
  auto neither =
      dir.write("n.yaml", R"(stages: [{stage_id: 0, devices: "0,1,2", num_replicas: 2, tensor_parallel_size: 2}])");
  message = error_message(
      [&] { build_effective_config(real_registry(), cli("Qwen/Qwen3-8B", neither.string()), environment()); },
      ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("devices \"0,1,2\" (3 devices) fit neither a template of 2 nor a pool of 4 (2 replicas)"),
            std::string::npos)
      << message;
}

TEST(EffectiveConfigTest, GlobalTensorParallelBroadcastErrorSuggestsStageOverrides) {
  CliConfigInputs inputs = cli(kOmni);
  add_flag(inputs, "tensor_parallel_size", 2, "--tensor-parallel-size");
  std::string message =
      error_message([&] { build_effective_config(real_registry(), inputs, environment()); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("stage 0 (thinker): devices \"0\" (1 device) must match the local world size 2"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("The global --tensor-parallel-size 2 applies to every stage (vLLM-Omni issue #5003)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(R"(--stage-overrides '{"0": {"tensor_parallel_size": 2, "devices": "..."}}')"),
            std::string::npos)
      << message;

  // The fix the message suggests works.
  inputs.engine_args.erase("tensor_parallel_size");
  inputs.stage_overrides = R"({"0": {"tensor_parallel_size": 2, "devices": "0,1"}})";
  EffectiveConfig config = build_effective_config(real_registry(), inputs, environment());
  EXPECT_EQ(stage(config, 0).engine_args["tensor_parallel_size"], 2);
  EXPECT_EQ(stage(config, 1).engine_args["tensor_parallel_size"], 1);
}

TEST(EffectiveConfigTest, StageOverrideErrors) {
  auto build = [](const std::string& overrides) {
    CliConfigInputs inputs = cli(kOmni);
    inputs.stage_overrides = overrides;
    return build_effective_config(real_registry(), inputs, environment());
  };
  std::string message = error_message([&] { build(R"({"7": {"max_num_seqs": 1}})"); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("--stage-overrides: stage 7 does not exist (pipeline 'qwen3_omni_moe' has stages 0, 1, 2)"),
            std::string::npos)
      << message;
  message = error_message([&] { build(R"({"0": {"max_num_seqs": 1})"); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("--stage-overrides: malformed JSON"), std::string::npos) << message;
  message = error_message([&] { build(R"([1, 2])"); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("must be a JSON object"), std::string::npos) << message;
  message = error_message([&] { build(R"({"talker": {}})"); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("key 'talker' is not a stage id"), std::string::npos) << message;
  message = error_message([&] { build(R"({"1": {"max_num_seqs": "many"}})"); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("--stage-overrides: stage 1: max_num_seqs must be an integer"), std::string::npos) << message;
  message = error_message([&] { build(R"({"1": 5})"); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("stage 1 must map to an object"), std::string::npos) << message;
}

TEST(EffectiveConfigTest, StageOverridesDeepMergeDicts) {
  CliConfigInputs inputs = cli(kOmni);
  inputs.stage_overrides =
      R"({"1": {"default_sampling_params": {"top_k": 5}, "compilation_config": {"level": 3}, "env": {"X": "1"}}})";
  EffectiveConfig config = build_effective_config(real_registry(), inputs, environment("npu"));
  const EffectiveStage& talker = stage(config, 1);
  EXPECT_EQ(talker.default_sampling_params["top_k"], 5);
  EXPECT_EQ(talker.default_sampling_params["temperature"], 0.9);
  EXPECT_EQ(talker.engine_args["compilation_config"],
            OrderedJson::parse(R"({"cudagraph_mode": "PIECEWISE", "level": 3})"));
  EXPECT_EQ(talker.env["X"], "1");
  EXPECT_EQ(source(talker, "default_sampling_params.top_k"), "stage-override");
}

TEST(EffectiveConfigTest, AsyncChunkRules) {
  CliConfigInputs inputs = cli("Qwen/Qwen2.5-Omni-7B");
  inputs.async_chunk = true;
  std::string message =
      error_message([&] { build_effective_config(real_registry(), inputs, environment()); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("no stage of pipeline 'qwen2_5_omni' produces async chunks"), std::string::npos) << message;

  CliConfigInputs off = cli(kOmni);
  off.async_chunk = false;
  EffectiveConfig config = build_effective_config(real_registry(), off, environment());
  EXPECT_FALSE(config.async_chunk);
  EXPECT_EQ(config.async_chunk_source.label(), "cli");

  // One stage: forced off.
  TempDir dir;
  auto single = dir.write("s.yaml", "async_chunk: true\n");
  EXPECT_FALSE(
      build_effective_config(real_registry(), cli("Qwen/Qwen3-8B", single.string()), environment()).async_chunk);

  auto disagree = dir.write("d.yaml", "stages: [{stage_id: 1, async_chunk: false}]\n");
  message =
      error_message([&] { build_effective_config(real_registry(), cli(kOmni, disagree.string()), environment()); },
                    ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("stages 0 and 1 disagree on async_chunk"), std::string::npos) << message;
}

TEST(EffectiveConfigTest, JsonReportHasTheDocumentedShape) {
  CliConfigInputs inputs = cli(kOmni);
  add_flag(inputs, "max_model_len", 8192, "--max-model-len");
  EffectiveConfig config = build_effective_config(real_registry(), inputs, environment());
  OrderedJson json = effective_config_json(config);
  EXPECT_EQ(json["pipeline"], "qwen3_omni_moe");
  EXPECT_EQ(json["model"], kOmni);
  EXPECT_EQ(json["async_chunk"], true);
  EXPECT_EQ(json["connectors"]["connector_of_shared_memory"]["name"], "SharedMemoryConnector");
  ASSERT_EQ(json["stages"].size(), 3u);
  const OrderedJson& s0 = json["stages"][0];
  EXPECT_EQ(s0["stage_id"], 0);
  EXPECT_EQ(s0["model_stage"], "thinker");
  EXPECT_EQ(s0["execution_type"], "llm_ar");
  EXPECT_EQ(s0["devices"], "0");
  EXPECT_EQ(s0["num_replicas"], 1);
  EXPECT_EQ(s0["engine_args"]["max_model_len"], 8192);
  EXPECT_EQ(s0["engine_args"]["trust_remote_code"], true);
  EXPECT_EQ(s0["engine_extras"]["trust_remote_code"], true);
  EXPECT_EQ(s0["sources"]["max_model_len"], "cli");
  EXPECT_EQ(s0["sources"]["max_num_seqs"], "deploy:" + std::string(OMNI_SOURCE_DIR) + "/deploy/qwen3_omni_moe.yaml");
  EXPECT_EQ(s0["sources"]["dtype"], "default");
  EXPECT_EQ(s0["sources"]["engine_output_type"], "pipeline");
  EXPECT_EQ(json["stages"][2]["execution_type"], "llm_generation");

  std::string table = effective_config_table(config, true);
  EXPECT_NE(table.find("max_model_len                      8192  <- cli (--max-model-len)"), std::string::npos)
      << table;
  EXPECT_NE(table.find("deploy (" + std::string(OMNI_SOURCE_DIR) + "/deploy/qwen3_omni_moe.yaml)"), std::string::npos);
  EXPECT_EQ(effective_config_table(config, false).find("<-"), std::string::npos);
}

}  // namespace
}  // namespace omni::config

namespace omni::config {
namespace {

// Every bundled deploy YAML must merge and validate for its pipeline on every platform.
TEST(BundledDeployTest, EveryPipelineValidatesOnEveryPlatform) {
  const std::vector<std::string> models = {"Qwen/Qwen3-0.6B", "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice",
                                           "Qwen/Qwen3-Omni-30B-A3B-Instruct", "Qwen/Qwen3-Omni-30B-A3B-Thinking",
                                           "Qwen/Qwen2.5-Omni-7B"};
  for (const std::string& model : models) {
    for (std::string_view platform : kPlatformNames) {
      CliConfigInputs inputs;
      inputs.model = model;
      EffectiveConfig config;
      ASSERT_NO_THROW(config = build_effective_config(testing::real_registry(), inputs,
                                                      testing::environment(std::string(platform))))
          << model << " on " << platform;
      EXPECT_EQ(config.stages.size(), config.pipeline->stages.size());
      for (const auto& stage : config.stages) EXPECT_TRUE(stage.devices.has_value()) << model << " " << platform;
    }
  }
}

}  // namespace
}  // namespace omni::config
