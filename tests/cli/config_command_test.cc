// `omnistage config` and `omnistage serve` run as a user runs them: the real binary, its exit
// code, stdout and stderr.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace omni {
namespace {

using nlohmann::ordered_json;
using testing::ProcessResult;
using testing::run_process;
using testing::TempDir;

constexpr const char* kOmni = "Qwen/Qwen3-Omni-30B-A3B-Instruct";
const std::string kDeployDir = std::string(OMNI_SOURCE_DIR) + "/deploy";

// Runs omnistage with the platform forced to cuda so results do not depend on the machine.
ProcessResult omnistage(std::vector<std::string> args, std::vector<std::string> env = {}) {
  args.insert(args.begin(), OMNISTAGE_BINARY);
  env.push_back("OMNISTAGE_PLATFORM=cuda");
  return run_process(args, env);
}

ordered_json config_json(std::vector<std::string> args, std::vector<std::string> env = {}) {
  args.insert(args.begin(), "config");
  args.push_back("--format");
  args.push_back("json");
  ProcessResult r = omnistage(args, env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return ordered_json::parse(r.out);
}

TEST(ConfigCommandTest, WorkedExampleFromTheCommandLine) {
  TempDir dir;
  auto overlay = dir.write("my_overrides.yaml", "base_config: " + kDeployDir +
                                                    "/qwen3_omni_moe.yaml\n"
                                                    "stages:\n  - stage_id: 1\n    gpu_memory_utilization: 0.5\n");
  ordered_json j = config_json({kOmni, "--omni", "--port", "8091", "--deploy-config", overlay.string(),
                                "--max-model-len", "16384", "--stage-overrides", R"({"0": {"max_num_seqs": 8}})"});
  EXPECT_EQ(j["pipeline"], "qwen3_omni_moe");
  EXPECT_EQ(j["model"], kOmni);
  EXPECT_EQ(j["async_chunk"], true);
  ASSERT_EQ(j["stages"].size(), 3u);
  const ordered_json& s0 = j["stages"][0];
  const ordered_json& s1 = j["stages"][1];
  EXPECT_EQ(s0["engine_args"]["max_num_seqs"], 8);
  EXPECT_EQ(s0["sources"]["max_num_seqs"], "stage-override");
  EXPECT_EQ(s0["engine_args"]["gpu_memory_utilization"], 0.9);
  EXPECT_EQ(s0["sources"]["gpu_memory_utilization"], "deploy:" + kDeployDir + "/qwen3_omni_moe.yaml");
  EXPECT_EQ(s1["engine_args"]["gpu_memory_utilization"], 0.5);
  EXPECT_EQ(s1["sources"]["gpu_memory_utilization"], "deploy:" + overlay.string());
  for (const auto& stage : j["stages"]) {
    EXPECT_EQ(stage["engine_args"]["max_model_len"], 16384);
    EXPECT_EQ(stage["sources"]["max_model_len"], "cli");
  }
}

TEST(ConfigCommandTest, TableAndExplain) {
  ProcessResult plain = omnistage({"config", "Qwen/Qwen3-8B"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("pipeline     qwen3  (known model 'Qwen/Qwen3-8B')"), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find("max_model_len                      32768\n"), std::string::npos) << plain.out;

  ProcessResult explain = omnistage({"config", "Qwen/Qwen3-8B", "--explain", "--max-num-seqs", "3"});
  ASSERT_EQ(explain.exit_code, 0) << explain.err;
  EXPECT_NE(explain.out.find("max_model_len                      32768  <- deploy (" + kDeployDir + "/qwen3.yaml)"),
            std::string::npos)
      << explain.out;
  EXPECT_NE(explain.out.find("max_num_seqs                       3  <- cli (--max-num-seqs)"), std::string::npos)
      << explain.out;
  EXPECT_NE(explain.out.find("dtype                              \"auto\"  <- default"), std::string::npos)
      << explain.out;
}

TEST(ConfigCommandTest, PlatformIsDetectedOrForced) {
  ProcessResult cpu =
      run_process({OMNISTAGE_BINARY, "config", "Qwen/Qwen3-8B", "--format", "json"}, {"OMNISTAGE_PLATFORM=cpu"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  ordered_json j = ordered_json::parse(cpu.out);
  EXPECT_EQ(j["platform"], "cpu");
  EXPECT_EQ(j["stages"][0]["engine_args"]["max_model_len"], 8192);
  EXPECT_EQ(j["stages"][0]["sources"]["max_model_len"], "platform:cpu");

  ProcessResult bad = run_process({OMNISTAGE_BINARY, "config", "Qwen/Qwen3-8B"}, {"OMNISTAGE_PLATFORM=tpu"});
  EXPECT_EQ(bad.exit_code, 64);
  EXPECT_NE(bad.err.find("OMNISTAGE_PLATFORM: unknown platform 'tpu' (allowed: cuda, rocm, npu, xpu, musa, cpu)"),
            std::string::npos)
      << bad.err;

  ProcessResult detected = run_process({OMNISTAGE_BINARY, "config", "Qwen/Qwen3-8B", "--format", "json"});
  ASSERT_EQ(detected.exit_code, 0) << detected.err;
  std::string platform = ordered_json::parse(detected.out)["platform"];
  EXPECT_TRUE(platform == "cpu" || platform == "cuda") << platform;
}

TEST(ConfigCommandTest, LocalModelDirectoryAndBareDeployConfigName) {
  TempDir dir;
  dir.write("tts/config.json", R"({"model_type": "qwen3_tts", "architectures": ["Qwen3TTSForConditionalGeneration"]})");
  ordered_json j = config_json({(dir.path() / "tts").string(), "--deploy-config", "qwen3_tts.yaml"});
  EXPECT_EQ(j["pipeline"], "qwen3_tts");
  EXPECT_EQ(j["deploy_files"][0], kDeployDir + "/qwen3_tts.yaml");
  EXPECT_EQ(j["stages"][0]["engine_args"]["subtalker_sampling_params"]["top_k"], 50);
  // The talker's sampling defaults from the YAML, with the pipeline's constraints merged in.
  const ordered_json& talker = j["stages"][0]["default_sampling_params"];
  EXPECT_EQ(talker["temperature"], 0.9);
  EXPECT_EQ(talker["top_k"], 50);
  EXPECT_EQ(talker["max_tokens"], 4096);
  EXPECT_EQ(talker["min_tokens"], 2);
  EXPECT_EQ(talker["repetition_penalty"], 1.05);
  EXPECT_EQ(talker["stop_token_ids"], ordered_json::array({2150}));
  // --tts-max-instructions-length reaches the talker (and serve's speech route reads it there).
  j = config_json(
      {(dir.path() / "tts").string(), "--deploy-config", "qwen3_tts.yaml", "--tts-max-instructions-length", "7"});
  EXPECT_EQ(j["stages"][0]["engine_args"]["tts_max_instructions_length"], 7);
}

TEST(ConfigCommandTest, DeployDirCanBeOverridden) {
  TempDir dir;
  dir.write("qwen3.yaml", "stages: [{stage_id: 0, max_num_seqs: 77}]\n");
  ordered_json j = config_json({"Qwen/Qwen3-4B"}, {"OMNISTAGE_DEPLOY_DIR=" + dir.path().string()});
  EXPECT_EQ(j["stages"][0]["engine_args"]["max_num_seqs"], 77);
}

TEST(ConfigCommandTest, AsyncChunkFlagsAndAliases) {
  ordered_json off = config_json({kOmni, "--no-async-chunk"});
  EXPECT_EQ(off["async_chunk"], false);
  ProcessResult both = omnistage({"config", kOmni, "--async-chunk", "--no-async-chunk"});
  EXPECT_EQ(both.exit_code, 64);
  ordered_json tp = config_json({"Qwen/Qwen3-8B", "-tp", "1", "--no-enable-prefix-caching"});
  EXPECT_EQ(tp["stages"][0]["sources"]["tensor_parallel_size"], "cli");
  EXPECT_EQ(tp["stages"][0]["engine_args"]["enable_prefix_caching"], false);
}

TEST(ConfigCommandTest, TensorParallelBroadcastFailsWithAdvice) {
  ProcessResult r = omnistage({"config", kOmni, "--tensor-parallel-size", "2"});
  EXPECT_EQ(r.exit_code, 78);
  EXPECT_NE(r.err.find("omnistage: error: stage 0 (thinker): devices \"0\" (1 device) must match the local world "
                       "size 2"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("vLLM-Omni issue #5003"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--stage-overrides"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(ConfigCommandTest, UsageErrors) {
  ProcessResult unknown = omnistage({"config", kOmni, "--max-modle-len", "5"});
  EXPECT_EQ(unknown.exit_code, 64);
  EXPECT_NE(unknown.err.find("--max-modle-len"), std::string::npos) << unknown.err;

  ProcessResult choice = omnistage({"config", kOmni, "--omni-lb-policy", "fastest"});
  EXPECT_EQ(choice.exit_code, 64);
  EXPECT_NE(choice.err.find("--omni-lb-policy: invalid choice 'fastest' (choose from random, round-robin, "
                            "least-queue-length)"),
            std::string::npos)
      << choice.err;

  ProcessResult number = omnistage({"config", kOmni, "--max-model-len", "16k"});
  EXPECT_EQ(number.exit_code, 64);
  EXPECT_NE(number.err.find("--max-model-len: '16k' is not an integer"), std::string::npos) << number.err;

  ProcessResult json = omnistage({"config", kOmni, "--stage-overrides", "{\"0\": {"});
  EXPECT_EQ(json.exit_code, 64);
  EXPECT_NE(json.err.find("--stage-overrides: malformed JSON"), std::string::npos) << json.err;

  ProcessResult stage = omnistage({"config", kOmni, "--stage-overrides", R"({"5": {"max_num_seqs": 1}})"});
  EXPECT_EQ(stage.exit_code, 64);
  EXPECT_NE(stage.err.find("stage 5 does not exist"), std::string::npos) << stage.err;

  ProcessResult gmu = omnistage({"config", kOmni, "--gpu-memory-utilization", "1.5"});
  EXPECT_EQ(gmu.exit_code, 64);
  EXPECT_NE(gmu.err.find("--gpu-memory-utilization: 1.5 is not in (0, 1]"), std::string::npos) << gmu.err;

  ProcessResult dp = omnistage({"config", kOmni, "--data-parallel-size", "2"});
  EXPECT_EQ(dp.exit_code, 64);
  EXPECT_NE(dp.err.find("--data-parallel-size is not accepted in omni mode"), std::string::npos) << dp.err;

  ProcessResult stage_id = omnistage({"config", kOmni, "--stage-id", "1"});
  EXPECT_EQ(stage_id.exit_code, 64);
  EXPECT_NE(stage_id.err.find("--stage-id requires --omni-master-address (-oma) and --omni-master-port (-omp)"),
            std::string::npos)
      << stage_id.err;

  ProcessResult format = omnistage({"config", kOmni, "--format", "xml"});
  EXPECT_EQ(format.exit_code, 64);
  EXPECT_NE(format.err.find("--format"), std::string::npos) << format.err;

  ProcessResult model = omnistage({"config", "acme/nothing"});
  EXPECT_EQ(model.exit_code, 66);
  EXPECT_NE(model.err.find("no pipeline for model 'acme/nothing'"), std::string::npos) << model.err;
}

TEST(ConfigCommandTest, MalformedDeployYamlNamesFileAndLine) {
  TempDir dir;
  auto file = dir.write("bad.yaml", "stages:\n  - stage_id: 0\n    max_num_seqs: [1\n");
  ProcessResult r = omnistage({"config", "Qwen/Qwen3-8B", "--deploy-config", file.string()});
  EXPECT_EQ(r.exit_code, 78);
  EXPECT_NE(r.err.find(file.string() + ":4:"), std::string::npos) << r.err;
}

TEST(ConfigCommandTest, DottedDiffusionAttentionConfig) {
  ordered_json j = config_json({"Qwen/Qwen3-8B", "--diffusion-attention-config.default.backend", "FLASH_ATTN",
                                "-dac.per_role.cross.backend=SAGE_ATTN"});
  EXPECT_EQ(j["stages"][0]["engine_args"]["diffusion_attention_config"],
            ordered_json::parse(
                R"({"default": {"backend": "FLASH_ATTN"}, "per_role": {"cross": {"backend": "SAGE_ATTN"}}})"));
}

TEST(ServeCommandTest, StopsAfterValidationNamingPipelineAndStage) {
  // Qwen3-Omni's thinker serves (its talker and code2wav are left out); Qwen2.5-Omni's thinker has no
  // stage model yet.
  ProcessResult r = omnistage({"serve", "Qwen/Qwen2.5-Omni-7B", "--port", "8091"});
  EXPECT_EQ(r.exit_code, 69);
  EXPECT_NE(r.err.find("pipeline 'qwen2_5_omni' is configured and valid, but it cannot be served yet: stage 0 "
                       "('thinker', llm_ar)"),
            std::string::npos)
      << r.err;
}

TEST(ServeCommandTest, ValidatesBeforeStopping) {
  ProcessResult r = omnistage({"serve", kOmni, "--stage-overrides", R"({"1": {"devices": "1,2"}})"});
  EXPECT_EQ(r.exit_code, 78);
  EXPECT_NE(r.err.find("stage 1 (talker): devices \"1,2\" (2 devices) must match the local world size 1"),
            std::string::npos)
      << r.err;
}

TEST(ServeCommandTest, FlagsOfMissingFeaturesAreNamed) {
  ProcessResult r = omnistage({"serve", kOmni, "--stage-id", "1", "--headless", "-oma", "10.0.0.1", "-omp", "26000",
                               "--cache-backend", "tea_cache"});
  EXPECT_EQ(r.exit_code, 69);
  EXPECT_NE(r.err.find("not supported yet: --cache-backend (not implemented by omnistage's diffusion stages yet"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("--headless ("), std::string::npos) << r.err;  // the distributed launch exists

  ProcessResult ray = omnistage({"serve", kOmni, "--worker-backend", "ray"});
  EXPECT_EQ(ray.exit_code, 69);
  EXPECT_NE(ray.err.find("--worker-backend ray"), std::string::npos) << ray.err;
  ProcessResult ray_address = omnistage({"serve", kOmni, "--ray-address", "10.0.0.1:6379"});
  EXPECT_EQ(ray_address.exit_code, 69);
  EXPECT_NE(ray_address.err.find("--ray-address (the Ray worker backend does not exist)"), std::string::npos)
      << ray_address.err;
}

// The server's flags (CORS lists, limits, timeouts) are checked like every other, naming the flag.
TEST(ServeCommandTest, ServerFlagsAreValidatedNamingTheFlag) {
  ProcessResult origins = omnistage({"serve", kOmni, "--allowed-origins", "http://a.example"});
  EXPECT_EQ(origins.exit_code, 64);
  EXPECT_NE(origins.err.find("--allowed-origins: malformed JSON"), std::string::npos) << origins.err;
  ProcessResult methods = omnistage({"serve", kOmni, "--allowed-methods", R"({"GET": 1})"});
  EXPECT_EQ(methods.exit_code, 64);
  EXPECT_NE(methods.err.find("--allowed-methods: '{\"GET\": 1}' is not a JSON list of strings"), std::string::npos)
      << methods.err;
  ProcessResult timeout = omnistage({"serve", kOmni, "--timeout-keep-alive", "0"});
  EXPECT_EQ(timeout.exit_code, 64);
  EXPECT_NE(timeout.err.find("--timeout-keep-alive must be > 0 seconds, got 0"), std::string::npos) << timeout.err;
  ProcessResult connections = omnistage({"serve", kOmni, "--max-connections", "-1"});
  EXPECT_EQ(connections.exit_code, 64);
  EXPECT_NE(connections.err.find("--max-connections: -1 is out of range [0, 1000000]"), std::string::npos)
      << connections.err;
  ProcessResult header = omnistage({"serve", kOmni, "--h11-max-incomplete-event-size", "10"});
  EXPECT_EQ(header.exit_code, 64);
  EXPECT_NE(header.err.find("--h11-max-incomplete-event-size: 10 is out of range"), std::string::npos) << header.err;
  // Valid values pass validation (serve then stops on the pipeline it cannot serve here).
  ProcessResult valid = omnistage({"serve", kOmni, "--allowed-origins", R"(["http://a.example"])", "--api-key", "k1",
                                   "k2", "--max-request-body-bytes", "1024", "--header-read-timeout", "0.5"});
  EXPECT_EQ(valid.exit_code, 69) << valid.err;
}

TEST(ServeCommandTest, HelpListsTheSpecFlagsWithDefaultsAndChoices) {
  ProcessResult r = omnistage({"serve", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* flag :
       {"--stage-overrides", "--deploy-config", "--async-chunk", "--no-async-chunk", "--omni-master-address",
        "--omni-dp-size-local", "--vae-parallel-mode", "--ulysses-degree", "--usp", "--tensor-parallel-size",
        "--enable-prefix-caching", "--no-enable-prefix-caching", "--api-server-count", "--dlo-no-use-allgather",
        "--allowed-origins", "--allow-credentials", "--timeout-keep-alive", "--h11-max-header-count"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
  EXPECT_NE(r.out.find("[alias: -oma]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("choices: random, round-robin, least-queue-length"), std::string::npos);
  EXPECT_NE(r.out.find("300"), std::string::npos);
  EXPECT_EQ(r.out.find("--diffusion-attention-config-entry"), std::string::npos);
}

}  // namespace
}  // namespace omni
