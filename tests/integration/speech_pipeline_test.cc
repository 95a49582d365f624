// /v1/audio/speech end to end through the real runtime: the qwen3_tts pipeline and its bundled
// deploy YAML turned into a PipelineSpec by pipeline_spec_from_config, the real Orchestrator and
// one `omnistage_test stage-worker` process per stage, with the test-only "test-tone" runner
// standing in for the talker and code2wav (test_tone_runner.h), behind the real ApiServer. Checks the
// connector's chunking options and the request's initial_codec_chunk_frames reaching code2wav,
// every format streamed and not, frame-aligned lengths, seeded determinism, stream == file, the
// errors, /v1/audio/voices, and the official OpenAI client's audio.speech.create.
#include <gtest/gtest.h>

#include <filesystem>

#include "base/base64.h"
#include "config/effective_config.h"
#include "media/audio_decoder.h"
#include "media/audio_encoder.h"
#include "media/pcm16.h"
#include "model/pipelines.h"
#include "runtime/ar_stage_runner.h"
#include "runtime/device_assignment.h"
#include "runtime/generation_stage_runner.h"
#include "runtime/orchestrator.h"
#include "runtime/pipeline_from_config.h"
#include "runtime/stage_runner.h"
#include "runtime/test_runners/test_tone_runner.h"
#include "server/api_server.h"
#include "server/test_server.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace omni::testing {
namespace {

using media::decode_audio;
using media::DecodedAudio;

constexpr int kSamplesPerFrame = 1920;
constexpr int kRate = 24000;

const config::PipelineRegistry& registry() {
  static const config::PipelineRegistry kRegistry = [] {
    config::PipelineRegistry r;
    model::register_all_pipelines(r);
    return r;
  }();
  return kRegistry;
}

// The checkpoint directory: a config.json with Qwen3-TTS's model type and two speakers.
void write_checkpoint(const TempDir& dir) {
  dir.write("config.json", R"({"model_type": "qwen3_tts", "architectures": ["Qwen3TTSForConditionalGeneration"],
                              "talker_config": {"spk_id": {"Vivian": 3065, "ryan": 3061}}})");
}

// The qwen3_tts pipeline as serve would build it, its stages then switched to test-tone.
runtime::PipelineSpec tone_pipeline(const std::filesystem::path& model_dir) {
  config::CliConfigInputs cli;
  cli.model = model_dir.string();
  config::ConfigEnvironment environment;
  environment.bundled_deploy_dir = std::string(OMNI_SOURCE_DIR) + "/deploy";
  environment.platform = "cpu";
  runtime::PipelineSpec pipeline =
      runtime::pipeline_spec_from_config(config::build_effective_config(registry(), cli, environment));
  EXPECT_EQ(pipeline.stages.size(), 2u);
  EXPECT_EQ(pipeline.stages[0].engine_args["runner"], runtime::kArRunnerKind);
  EXPECT_EQ(pipeline.stages[0].engine_args["stage_model"], "qwen3_tts_talker");
  EXPECT_EQ(pipeline.stages[1].engine_args["runner"], runtime::kGenerationRunnerKind);
  EXPECT_EQ(pipeline.stages[1].engine_args["stage_model"], "qwen3_tts_code2wav");
  // The family describes the checkpoint for the server (voices as config.json spells them).
  EXPECT_EQ(pipeline.model_facts.voices, (std::vector<std::string>{"Vivian", "ryan"}));
  // The bundled qwen3_tts.yaml's connector options reach code2wav.
  EXPECT_EQ(pipeline.stages[1].engine_args["connector_extra"]["initial_codec_chunk_frames"], 1);
  EXPECT_EQ(pipeline.stages[1].engine_args["connector_extra"]["codec_chunk_frames"], 25);
  EXPECT_FALSE(pipeline.stages[0].engine_args.contains("connector_extra"));
  EXPECT_TRUE(pipeline.stages[1].async_chunk);
  for (runtime::StageSpec& stage : pipeline.stages) stage.engine_args["runner"] = runtime::kTestToneRunnerKind;
  return pipeline;
}

// Stage placement of the qwen3_tts pipeline on a GPU host: by default (the bundled deploy YAML)
// both stages run on the launcher's first visible GPU, each with its own gpu_memory_utilization
// share; a deploy overlay's `devices` puts code2wav on a second GPU; every stage's device engine
// argument stays "auto" (the stage process's first visible GPU, or its CPU).
TEST(SpeechPipelinePlacement, OneGpuByDefaultTwoWithDevices) {
  TempDir dir;
  write_checkpoint(dir);
  config::CliConfigInputs cli;
  cli.model = dir.path().string();
  config::ConfigEnvironment environment;
  environment.bundled_deploy_dir = std::string(OMNI_SOURCE_DIR) + "/deploy";
  environment.platform = "cuda";
  const std::optional<std::string> launcher = "4,5";
  auto visible = [&](const runtime::StageSpec& stage) {
    return runtime::replica_visible_devices(stage.stage_id, stage.devices, stage.num_replicas, 1, launcher);
  };

  runtime::PipelineSpec one =
      runtime::pipeline_spec_from_config(config::build_effective_config(registry(), cli, environment));
  ASSERT_EQ(one.stages.size(), 2u);
  for (const runtime::StageSpec& stage : one.stages) {
    EXPECT_EQ(stage.devices, "0") << stage.stage_id;
    EXPECT_EQ(visible(stage), (std::vector<std::optional<std::string>>{"4"})) << stage.stage_id;
    EXPECT_DOUBLE_EQ(stage.engine_args["gpu_memory_utilization"].get<double>(), 0.3) << stage.stage_id;
    EXPECT_FALSE(stage.engine_args.contains("device")) << stage.stage_id;
  }

  const std::filesystem::path overlay = dir.write(
      "two_gpus.yaml",
      "base_config: qwen3_tts.yaml\nstages:\n  - {stage_id: 1, devices: \"1\", gpu_memory_utilization: 0.5}\n");
  cli.deploy_config = overlay.string();
  runtime::PipelineSpec two =
      runtime::pipeline_spec_from_config(config::build_effective_config(registry(), cli, environment));
  EXPECT_EQ(visible(two.stages[0]), (std::vector<std::optional<std::string>>{"4"}));
  EXPECT_EQ(visible(two.stages[1]), (std::vector<std::optional<std::string>>{"5"}));
  EXPECT_DOUBLE_EQ(two.stages[0].engine_args["gpu_memory_utilization"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(two.stages[1].engine_args["gpu_memory_utilization"].get<double>(), 0.5);
}

std::vector<float> tone(std::optional<int64_t> seed, size_t frames) {
  std::vector<float> samples(frames * kSamplesPerFrame);
  const double hz = runtime::tone_frequency(seed);
  for (size_t i = 0; i < samples.size(); ++i) samples[i] = runtime::tone_sample(hz, kRate, static_cast<int64_t>(i));
  return samples;
}

class SpeechPipelineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    checkpoint_dir = new TempDir;
    write_checkpoint(*checkpoint_dir);
    runtime::OrchestratorOptions options;
    options.worker_program = OMNISTAGE_TEST_BINARY;
    const runtime::PipelineSpec pipeline = tone_pipeline(checkpoint_dir->path());
    orchestrator = new runtime::Orchestrator(pipeline, options);
    server::ApiServerOptions api;
    api.port = 0;
    api.served_model_names = {"qwen3-tts"};
    api.model_path = checkpoint_dir->path().string();
    api.speech.voices = pipeline.model_facts.voices;
    metrics = new MetricsRegistry;
    api_server = new server::ApiServer(api, *orchestrator, nullptr, *metrics);
    api_server->start();
  }

  static void TearDownTestSuite() {
    api_server->stop();
    orchestrator->shutdown();
    delete api_server;
    delete orchestrator;
    delete metrics;
    delete checkpoint_dir;
  }

  static std::string url(const std::string& path) {
    return "http://127.0.0.1:" + std::to_string(api_server->port()) + path;
  }

  static CurlReply speech(const Json& body) {
    return run_curl({"--max-time", "60", "-H", "Content-Type: application/json", "--data-binary", body.dump(),
                     url("/v1/audio/speech")});
  }

  static TempDir* checkpoint_dir;
  static runtime::Orchestrator* orchestrator;
  static MetricsRegistry* metrics;
  static server::ApiServer* api_server;
};

TempDir* SpeechPipelineTest::checkpoint_dir = nullptr;
runtime::Orchestrator* SpeechPipelineTest::orchestrator = nullptr;
MetricsRegistry* SpeechPipelineTest::metrics = nullptr;
server::ApiServer* SpeechPipelineTest::api_server = nullptr;

std::vector<size_t> sse_chunk_frames(const CurlReply& reply) {
  std::vector<size_t> frames;
  std::vector<std::string> events = sse_payloads(reply.body);
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    frames.push_back(base64_decode(Json::parse(events[i])["audio"].get<std::string>()).size() / 2 / kSamplesPerFrame);
  }
  return frames;
}

TEST_F(SpeechPipelineTest, VoicesComeFromTheCheckpoint) {
  CurlReply reply = run_curl({url("/v1/audio/voices")});
  ASSERT_EQ(reply.status, 200);
  EXPECT_EQ(reply.json(), Json::parse(R"({"voices": ["Vivian", "ryan"], "uploaded_voices": []})"));
}

TEST_F(SpeechPipelineTest, WavIsTheToneAtTwentyFourKilohertzMonoOneFramePerCharacter) {
  const std::string text = "Hello from the pipeline";  // 23 characters: 23 frames
  CurlReply reply = speech({{"input", text}, {"voice", "vivian"}, {"response_format", "wav"}, {"seed", 5}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  DecodedAudio audio = decode_audio(reply.body);
  EXPECT_EQ(audio.sample_rate, kRate);
  EXPECT_EQ(audio.channels, 1);
  ASSERT_EQ(audio.samples.size(), text.size() * kSamplesPerFrame);
  const std::vector<float> expected = tone(5, text.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(std::lrint(audio.samples[i] * 32768.0f), media::to_pcm16(expected[i])) << "sample " << i;
  }
}

TEST_F(SpeechPipelineTest, CodecChunkingFollowsTheConnectorAndTheRequest) {
  const std::string text(30, 'x');
  // The deploy YAML: the first audio after 1 frame, then chunks of 25, then the rest.
  CurlReply yaml = speech({{"input", text}, {"response_format", "pcm"}, {"stream_format", "sse"}});
  ASSERT_EQ(yaml.status, 200) << yaml.body;
  EXPECT_EQ(sse_chunk_frames(yaml), (std::vector<size_t>{1, 25, 4}));
  // The request's initial_codec_chunk_frames reaches code2wav.
  CurlReply request = speech(
      {{"input", text}, {"response_format", "pcm"}, {"stream_format", "sse"}, {"initial_codec_chunk_frames", 3}});
  EXPECT_EQ(sse_chunk_frames(request), (std::vector<size_t>{3, 25, 2}));
  Json done = Json::parse(sse_payloads(request.body).back());
  EXPECT_EQ(done["type"], "speech.audio.done");
}

TEST_F(SpeechPipelineTest, EveryFormatStreamedAndNotIsDeterministicAndStreamEqualsFile) {
  const std::string text = "Streaming and files";  // 19 frames
  for (media::AudioFormat format : media::audio_formats()) {
    const std::string name(media::audio_format_name(format));
    SCOPED_TRACE(name);
    Json body = {{"input", text}, {"response_format", name}, {"seed", 11}};
    CurlReply file = speech(body);
    ASSERT_EQ(file.status, 200) << file.body;
    CurlReply again = speech(body);
    EXPECT_TRUE(again.body == file.body) << "same seed, different bytes";
    body["seed"] = 12;
    EXPECT_FALSE(speech(body).body == file.body) << "another seed, same bytes";
    body["seed"] = 11;
    body["stream"] = true;
    CurlReply stream = speech(body);
    ASSERT_EQ(stream.status, 200);
    body["stream_format"] = "sse";
    std::string sse_bytes;
    std::vector<std::string> events = sse_payloads(speech(body).body);
    for (size_t i = 0; i + 1 < events.size(); ++i)
      sse_bytes += base64_decode(Json::parse(events[i])["audio"].get<std::string>());
    EXPECT_TRUE(sse_bytes == stream.body) << "SSE deltas differ from the raw stream";
    ASSERT_EQ(stream.body.size(), file.body.size());
    const size_t header = format == media::AudioFormat::kWav ? 44 : format == media::AudioFormat::kFlac ? 42 : 0;
    EXPECT_TRUE(stream.body.compare(header, std::string::npos, file.body, header, std::string::npos) == 0);
    if (format == media::AudioFormat::kPcm) {
      EXPECT_EQ(file.body.size(), 2u * text.size() * kSamplesPerFrame);
      continue;
    }
    DecodedAudio audio = decode_audio(stream.body);
    EXPECT_EQ(audio.channels, 1);
    if (format == media::AudioFormat::kOpus) {
      EXPECT_EQ(audio.sample_rate, 48000);
    } else {
      EXPECT_EQ(audio.sample_rate, kRate);
    }
    if (format == media::AudioFormat::kWav || format == media::AudioFormat::kFlac) {
      EXPECT_EQ(audio.samples.size() % kSamplesPerFrame, 0u);
      EXPECT_EQ(audio.samples.size(), text.size() * kSamplesPerFrame);
    }
  }
}

TEST_F(SpeechPipelineTest, BadRequestsNeverReachTheStages) {
  CurlReply empty = speech({{"input", ""}});
  EXPECT_EQ(empty.status, 400);
  EXPECT_EQ(empty.json()["error"]["param"], "input");
  CurlReply voice = speech({{"input", "hi"}, {"voice", "nobody"}});
  EXPECT_EQ(voice.status, 400);
  EXPECT_NE(voice.body.find("Vivian, ryan"), std::string::npos) << voice.body;
  CurlReply format = speech({{"input", "hi"}, {"response_format", "ogg"}});
  EXPECT_EQ(format.status, 400);
  EXPECT_NE(format.body.find("wav, pcm, flac, mp3, opus, aac"), std::string::npos);
  CurlReply instructions = speech({{"input", "hi"}, {"instructions", std::string(501, 'i')}});
  EXPECT_EQ(instructions.status, 400);
  EXPECT_NE(instructions.body.find("the limit is 500"), std::string::npos) << instructions.body;
  EXPECT_TRUE(orchestrator->healthy());
}

TEST_F(SpeechPipelineTest, OpenAiClientAudioSpeechCreate) {
  const std::string modules = std::string(OMNI_SOURCE_DIR) + "/third_party/npm/node_modules";
  ASSERT_TRUE(std::filesystem::exists(modules + "/openai/package.json")) << "run scripts/install-deps";
  ProcessResult result = run_process(
      {"/usr/bin/node", std::string(OMNI_SOURCE_DIR) + "/tests/integration/speech_client.cjs", url("/v1"), "qwen3-tts"},
      {"NODE_PATH=" + modules});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  Json out = Json::parse(result.out);
  EXPECT_EQ(out["content_type"], "audio/wav");
  DecodedAudio wav = decode_audio(base64_decode(out["wav_base64"].get<std::string>()));
  EXPECT_EQ(wav.sample_rate, kRate);
  EXPECT_EQ(wav.samples.size(), 5u * kSamplesPerFrame);  // "Hello"
  EXPECT_EQ(base64_decode(out["mp3_base64"].get<std::string>()).substr(0, 1), "\xff");
  EXPECT_EQ(out["error_status"], 400);
  EXPECT_NE(out["error_message"].get<std::string>().find("unknown voice"), std::string::npos);
}

}  // namespace
}  // namespace omni::testing
