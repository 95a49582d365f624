#include "config/deploy_loader.h"

#include <gtest/gtest.h>

#include "config_test_util.h"
#include "support/temp_dir.h"

namespace omni::config {
namespace {

using omni::testing::TempDir;
using testing::error_message;

DeployLoadOptions options(const std::string& platform = "", const std::filesystem::path& bundled = {}) {
  DeployLoadOptions o;
  o.platform = platform;
  o.bundled_dir = bundled;
  return o;
}

const StageDeployConfig& stage_of(const DeployConfig& deploy, int id) {
  const StageDeployConfig* stage = deploy.find_stage(id);
  if (!stage) throw std::runtime_error("no stage");
  return *stage;
}

TEST(DeployLoaderTest, FlatLayoutIsTypedAndUnknownKeysFallThroughToExtras) {
  TempDir dir;
  auto file = dir.write("d.yaml", R"(
async_chunk: false
dtype: bfloat16
stages:
  - stage_id: 0
    devices: "0,1"
    num_replicas: 2
    max_num_seqs: 8
    gpu_memory_utilization: 0.5
    enforce_eager: true
    compilation_config: {cudagraph_mode: PIECEWISE}
    hf_overrides: {rope_scaling: null}
    kv_cache_memory_bytes: 1000
    engine_extras: {speculative_config: {method: mtp}}
    default_sampling_params: {temperature: 0.2}
)");
  DeployConfig deploy = load_deploy_config(file, options());
  EXPECT_FALSE(deploy.async_chunk);
  EXPECT_EQ(deploy.dtype, "bfloat16");
  const StageDeployConfig& s = stage_of(deploy, 0);
  EXPECT_EQ(s.devices, "0,1");
  EXPECT_EQ(s.num_replicas, 2);
  EXPECT_EQ(s.max_num_seqs, 8);
  EXPECT_DOUBLE_EQ(*s.gpu_memory_utilization, 0.5);
  EXPECT_EQ(s.enforce_eager, true);
  EXPECT_EQ(s.compilation_config, OrderedJson::parse(R"({"cudagraph_mode": "PIECEWISE"})"));
  EXPECT_EQ(s.engine_extras, OrderedJson::parse(
                                 R"({"speculative_config": {"method": "mtp"}, "hf_overrides": {"rope_scaling": null},
                                     "kv_cache_memory_bytes": 1000})"));
  EXPECT_EQ(s.default_sampling_params["temperature"], 0.2);
  EXPECT_EQ(s.sources.at("max_num_seqs").label(), "deploy:" + file.string());
  EXPECT_EQ(s.sources.at("engine_extras.hf_overrides").label(), "deploy:" + file.string());
}

TEST(DeployLoaderTest, NestedEngineArgsAndRuntimeLayoutIsAccepted) {
  TempDir dir;
  auto file = dir.write("d.yaml", R"(
stages:
  - stage_id: 1
    devices: "5"
    runtime: {devices: "2,3", num_replicas: 2, env: {A: "1"}}
    max_num_seqs: 4
    engine_args:
      max_num_seqs: 16
      tensor_parallel_size: 2
      custom_flag: yes_please
)");
  const DeployConfig deploy_s = load_deploy_config(file, options());
  const StageDeployConfig& s = stage_of(deploy_s, 1);
  EXPECT_EQ(s.devices, "2,3");  // runtime wins over flat
  EXPECT_EQ(s.num_replicas, 2);
  EXPECT_EQ(s.env["A"], "1");
  EXPECT_EQ(s.max_num_seqs, 16);  // nested wins over flat
  EXPECT_EQ(s.tensor_parallel_size, 2);
  EXPECT_EQ(s.engine_extras["custom_flag"], "yes_please");
}

TEST(DeployLoaderTest, OverlayChainResolvesRelativePathsAndDeepMerges) {
  TempDir dir;
  dir.write("base/base.yaml", R"(
async_chunk: true
connectors:
  shm: {name: SharedMemoryConnector, extra: {codec_chunk_frames: 25}}
stages:
  - stage_id: 0
    max_num_seqs: 32
    gpu_memory_utilization: 0.9
    devices: "0"
    default_sampling_params: {temperature: 0.9, top_k: 50}
    engine_extras: {hf_overrides: {a: 1, b: 2}}
  - stage_id: 1
    max_num_seqs: 16
)");
  dir.write("mid/mid.yaml", R"(
base_config: ../base/base.yaml
stages:
  - stage_id: 0
    default_sampling_params: {top_k: 20}
    engine_extras: {hf_overrides: {b: 3}}
)");
  auto top = dir.write("top/deeper/top.yaml", R"(
base_config: ../../mid/mid.yaml
async_chunk: false
stages:
  - stage_id: 0
    devices: "1"
  - stage_id: 2
    max_num_seqs: 1
)");
  DeployConfig deploy = load_deploy_config(top, options());
  EXPECT_FALSE(deploy.async_chunk);
  ASSERT_EQ(deploy.files.size(), 3u);
  EXPECT_EQ(deploy.files[0], (dir.path() / "base/base.yaml").string());
  EXPECT_EQ(deploy.files[2], top.string());
  ASSERT_EQ(deploy.stages.size(), 3u);
  EXPECT_EQ(deploy.stages[2].stage_id, 2);  // new ids appended after the base's
  const StageDeployConfig& s0 = stage_of(deploy, 0);
  EXPECT_EQ(s0.devices, "1");
  EXPECT_EQ(s0.max_num_seqs, 32);
  EXPECT_EQ(s0.default_sampling_params, OrderedJson::parse(R"({"temperature": 0.9, "top_k": 20})"));
  EXPECT_EQ(s0.engine_extras["hf_overrides"], OrderedJson::parse(R"({"a": 1, "b": 3})"));
  EXPECT_EQ(s0.sources.at("default_sampling_params.temperature").file, (dir.path() / "base/base.yaml").string());
  EXPECT_EQ(s0.sources.at("default_sampling_params.top_k").file, (dir.path() / "mid/mid.yaml").string());
  EXPECT_EQ(s0.sources.at("devices").file, top.string());
  EXPECT_EQ(deploy.connectors.at("shm").extra["codec_chunk_frames"], 25);
  EXPECT_EQ(deploy.sources.at("async_chunk").file, top.string());
}

TEST(DeployLoaderTest, BaseConfigCycleIsAnErrorNamingTheFiles) {
  TempDir dir;
  dir.write("a.yaml", "base_config: b.yaml\n");
  dir.write("b.yaml", "base_config: a.yaml\n");
  std::string message =
      error_message([&] { load_deploy_config(dir.path() / "a.yaml", options()); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("base_config cycle"), std::string::npos) << message;
  EXPECT_NE(message.find("a.yaml -> "), std::string::npos) << message;
  EXPECT_NE(message.find("b.yaml -> "), std::string::npos) << message;
}

TEST(DeployLoaderTest, MissingBaseConfigIsNotFound) {
  TempDir dir;
  auto file = dir.write("o.yaml", "base_config: nowhere.yaml\n");
  std::string message = error_message([&] { load_deploy_config(file, options()); }, ErrorCode::kNotFound);
  EXPECT_NE(message.find("nowhere.yaml"), std::string::npos) << message;
}

TEST(DeployLoaderTest, BareBaseConfigNameFallsBackToTheBundledDir) {
  TempDir dir;
  auto file = dir.write("o.yaml", "base_config: qwen3_tts.yaml\nstages:\n  - {stage_id: 1, max_num_seqs: 2}\n");
  DeployConfig deploy = load_deploy_config(file, options("", std::string(OMNI_SOURCE_DIR) + "/deploy"));
  EXPECT_EQ(stage_of(deploy, 1).max_num_seqs, 2);
  EXPECT_EQ(stage_of(deploy, 0).max_model_len, 4096);
  EXPECT_EQ(deploy.connectors.count("connector_of_shared_memory"), 1u);
}

TEST(DeployLoaderTest, LegacyStageArgsAndTopologyKeysAreRejected) {
  TempDir dir;
  auto legacy = dir.write("legacy.yaml", "stage_args:\n  - stage_id: 0\n");
  std::string message = error_message([&] { load_deploy_config(legacy, options()); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("removed `stage_args` schema"), std::string::npos) << message;

  auto topology = dir.write("topology.yaml", "stages:\n  - {stage_id: 0, model_stage: thinker}\n");
  message = error_message([&] { load_deploy_config(topology, options()); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("'model_stage' is a pipeline (topology) field"), std::string::npos) << message;
}

TEST(DeployLoaderTest, MalformedYamlReportsFileAndLine) {
  TempDir dir;
  auto file = dir.write("broken.yaml", "stages:\n  - stage_id: 0\n    devices: [0, 1\n");
  std::string message = error_message([&] { load_deploy_config(file, options()); }, ErrorCode::kInvalidConfig);
  EXPECT_EQ(message.rfind(file.string() + ":4:", 0), 0u) << message;
}

TEST(DeployLoaderTest, TypeErrorsNameFileStageAndField) {
  TempDir dir;
  auto file = dir.write("t.yaml", "stages:\n  - stage_id: 3\n    max_num_seqs: lots\n");
  std::string message = error_message([&] { load_deploy_config(file, options()); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find(file.string() + ": stage 3: max_num_seqs must be an integer, got \"lots\""), std::string::npos)
      << message;
  auto no_id = dir.write("n.yaml", "stages:\n  - max_num_seqs: 1\n");
  message = error_message([&] { load_deploy_config(no_id, options()); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("missing stage_id"), std::string::npos) << message;
  auto dup = dir.write("dup.yaml", "stages:\n  - stage_id: 0\n  - stage_id: 0\n");
  message = error_message([&] { load_deploy_config(dup, options()); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("stage_id 0 appears twice"), std::string::npos) << message;
}

TEST(DeployLoaderTest, ConnectorSchemaIsValidated) {
  TempDir dir;
  auto unknown = dir.write("c1.yaml", "connectors:\n  x: {name: CarrierPigeonConnector}\n");
  std::string message = error_message([&] { load_deploy_config(unknown, options()); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("connectors.x: unknown connector class 'CarrierPigeonConnector'"), std::string::npos)
      << message;
  auto nameless = dir.write("c2.yaml", "connectors:\n  x: {extra: {a: 1}}\n");
  message = error_message([&] { load_deploy_config(nameless, options()); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("missing `name:`"), std::string::npos) << message;
  auto bad_key = dir.write("c3.yaml", "stages:\n  - {stage_id: 1, input_connectors: {stage_0: shm}}\n");
  message = error_message([&] { load_deploy_config(bad_key, options()); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("input_connectors key 'stage_0' must be from_stage_<stage id>"), std::string::npos) << message;
}

TEST(DeployLoaderTest, PlatformSectionAppliesOnlyOnItsPlatform) {
  TempDir dir;
  auto file = dir.write("p.yaml", R"(
stages:
  - stage_id: 0
    devices: "0"
    max_num_seqs: 32
    env: {A: "1"}
    default_sampling_params: {temperature: 0.5, top_k: 5}
  - stage_id: 1
    max_num_seqs: 16
platforms:
  npu:
    stages:
      - stage_id: 0
        devices: "0,1"
        tensor_parallel_size: 2
        env: {B: "2"}
        default_sampling_params: {top_k: 7}
        max_cudagraph_capture_size: 0
      - stage_id: 9
        max_num_seqs: 1
  cpu:
    stages:
      - stage_id: 1
        engine_args: {max_num_seqs: 2}
)");
  DeployConfig cuda = load_deploy_config(file, options("cuda"));
  EXPECT_EQ(stage_of(cuda, 0).devices, "0");
  EXPECT_FALSE(stage_of(cuda, 0).tensor_parallel_size.has_value());

  DeployConfig npu = load_deploy_config(file, options("npu"));
  const StageDeployConfig& s0 = stage_of(npu, 0);
  EXPECT_EQ(s0.devices, "0,1");
  EXPECT_EQ(s0.tensor_parallel_size, 2);
  EXPECT_EQ(s0.env, OrderedJson::parse(R"({"A": "1", "B": "2"})"));
  EXPECT_EQ(s0.default_sampling_params, OrderedJson::parse(R"({"temperature": 0.5, "top_k": 7})"));
  EXPECT_EQ(s0.engine_extras["max_cudagraph_capture_size"], 0);
  EXPECT_EQ(s0.sources.at("tensor_parallel_size").label(), "platform:npu");
  EXPECT_EQ(s0.sources.at("tensor_parallel_size").file, file.string());
  EXPECT_EQ(s0.sources.at("default_sampling_params.temperature").label(), "deploy:" + file.string());
  EXPECT_EQ(npu.find_stage(9), nullptr);  // platform entries for unknown stages are ignored

  DeployConfig cpu = load_deploy_config(file, options("cpu"));
  EXPECT_EQ(stage_of(cpu, 1).max_num_seqs, 2);
  EXPECT_EQ(stage_of(cpu, 1).sources.at("max_num_seqs").label(), "platform:cpu");
}

TEST(DeployLoaderTest, OverlayMergesPlatformSectionsPerStage) {
  TempDir dir;
  dir.write("base.yaml", R"(
stages: [{stage_id: 0, max_num_seqs: 8}]
platforms:
  rocm: {stages: [{stage_id: 0, enforce_eager: true, max_num_seqs: 4}]}
)");
  auto overlay = dir.write("overlay.yaml", R"(
base_config: base.yaml
platforms:
  rocm: {stages: [{stage_id: 0, max_num_seqs: 2}]}
)");
  const DeployConfig deploy_s = load_deploy_config(overlay, options("rocm"));
  const StageDeployConfig& s = stage_of(deploy_s, 0);
  EXPECT_EQ(s.enforce_eager, true);
  EXPECT_EQ(s.max_num_seqs, 2);
  EXPECT_EQ(s.sources.at("max_num_seqs").file, overlay.string());
}

TEST(DeployLoaderTest, TopLevelFieldsAreValidated) {
  TempDir dir;
  auto session = dir.write("s.yaml", "session_mode: chatty\n");
  std::string message = error_message([&] { load_deploy_config(session, options()); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("session_mode must be 'turn' or 'duplex'"), std::string::npos) << message;
  auto duplex = dir.write("d.yaml", "duplex_session: {max_sessions: 0}\n");
  message = error_message([&] { load_deploy_config(duplex, options()); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("duplex_session.max_sessions must be a positive integer"), std::string::npos) << message;
  auto platform = dir.write("p.yaml", "platforms: {tpu: {stages: []}}\n");
  message = error_message([&] { load_deploy_config(platform, options()); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("unknown platform 'tpu'"), std::string::npos) << message;
  auto runner = dir.write("r.yaml", "model_runner: v2\n");
  message = error_message([&] { load_deploy_config(runner, options("npu")); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("model_runner v2 is not available on platform npu"), std::string::npos) << message;
  EXPECT_EQ(load_deploy_config(runner, options("cuda")).model_runner, "v2");
}

TEST(DeployLoaderTest, AliasExpansionIsBounded) {
  std::string text = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n";
  std::string previous = "a";
  for (int level = 0; level < 8; ++level) {
    std::string name = "l" + std::to_string(level);
    text += name + ": &" + name + " [";
    for (int i = 0; i < 10; ++i) text += (i ? ", *" : "*") + previous;
    text += "]\n";
    previous = name;
  }
  std::string message =
      error_message([&] { parse_deploy_config(text, "/virtual/bomb.yaml", options()); }, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("document too large"), std::string::npos) << message;
}

TEST(DeployLoaderTest, DeployPathLookupUsesTheBundledDirForBareNames) {
  const std::filesystem::path bundled = std::string(OMNI_SOURCE_DIR) + "/deploy";
  EXPECT_EQ(resolve_deploy_path("qwen3.yaml", bundled), bundled / "qwen3.yaml");
  std::string message = error_message([&] { resolve_deploy_path("missing.yaml", bundled); }, ErrorCode::kNotFound);
  EXPECT_NE(message.find("--deploy-config missing.yaml: no such file (also looked in the bundled deploy dir"),
            std::string::npos)
      << message;
}

TEST(DeployLoaderTest, EveryBundledDeployConfigLoadsOnEveryPlatform) {
  const std::filesystem::path bundled = std::string(OMNI_SOURCE_DIR) + "/deploy";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(bundled)) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    for (std::string_view platform : kPlatformNames) {
      DeployConfig deploy = load_deploy_config(entry.path(), options(std::string(platform), bundled));
      EXPECT_FALSE(deploy.stages.empty()) << entry.path();
    }
  }
  EXPECT_EQ(files, 6);
}

}  // namespace
}  // namespace omni::config
