// `omnistage serve` of the Qwen3-TTS demo checkpoint end to end: `omnistage demo-model --arch
// qwen3_tts` (random talker and codec weights in the released layout), served by the real binary
// as the qwen3_tts pipeline (talker and code2wav stage processes, shared-memory connector,
// async_chunk), driven with curl and the official OpenAI client. The audio is noise, so the tests
// check what holds for any weights: formats, rate, frame alignment, seeded determinism, stream ==
// file, speed, the default voice, the prompt layout, the errors, the voices, and a clean shutdown.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "base/base64.h"
#include "base/json.h"
#include "integration/serve_process.h"
#include "media/audio_decoder.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace omni::testing {
namespace {

using media::decode_audio;
using media::DecodedAudio;

constexpr int kSamplesPerFrame = 1920;  // 80 ms at 24 kHz: one codec frame
constexpr int kRate = 24000;
// Few frames keep the suite fast; the talker stops at this many unless it samples EOS first.
constexpr int kMaxFrames = 10;
const std::vector<std::string> kFormats = {"wav", "pcm", "flac", "mp3", "opus", "aac"};

// The data: payloads of an SSE body up to [DONE], unparsed.
std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("data: ")) continue;
    if (line == "data: [DONE]") break;
    out.push_back(line.substr(6));
  }
  return out;
}

inline constexpr char kTtsArch[] = "qwen3_tts";

class TtsServeTest : public DemoServerSuite<kTtsArch> {
 protected:
  static HttpResult speech(Json body) {
    body["model"] = kModelName;
    if (!body.contains("max_new_tokens")) body["max_new_tokens"] = kMaxFrames;
    return curl(*server_, "/v1/audio/speech", body.dump());
  }
};

TEST_F(TtsServeTest, VoicesAreTheDemoSpeakers) {
  HttpResult reply = curl(*server_, "/v1/audio/voices", std::nullopt);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json voices = Json::parse(reply.body);
  // vLLM-Omni's listing: the names, and the uploaded voices (none: a CustomVoice checkpoint cannot
  // clone, so it has no POST /v1/audio/voices).
  std::vector<std::string> names = voices["voices"].get<std::vector<std::string>>();
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"aiden", "dylan", "eric", "ryan", "serena", "vivian"}));
  EXPECT_EQ(voices["uploaded_voices"], Json::array());
  EXPECT_EQ(curl(*server_, "/v1/audio/voices", std::nullopt, {"-X", "POST", "-F", "name=x"}).status, 405);
}

TEST_F(TtsServeTest, EveryFormatStreamedAndNotIsSeededAndStreamEqualsFile) {
  for (const std::string& format : kFormats) {
    SCOPED_TRACE(format);
    Json body = {
        {"input", "Hello from the demo talker."}, {"voice", "Vivian"}, {"response_format", format}, {"seed", 7}};
    HttpResult file = speech(body);
    ASSERT_EQ(file.status, 200) << file.body;
    ASSERT_FALSE(file.body.empty());
    EXPECT_TRUE(speech(body).body == file.body) << "same seed, different bytes";

    body["stream"] = true;
    HttpResult stream = speech(body);
    ASSERT_EQ(stream.status, 200) << stream.body;
    body["stream_format"] = "sse";
    HttpResult sse = speech(body);
    ASSERT_EQ(sse.status, 200) << sse.body;
    std::vector<std::string> events = sse_data(sse.body);
    ASSERT_GE(events.size(), 2u) << sse.body;
    std::string sse_bytes;
    for (size_t i = 0; i + 1 < events.size(); ++i)
      sse_bytes += base64_decode(Json::parse(events[i])["audio"].get<std::string>());
    EXPECT_EQ(Json::parse(events.back())["type"], "speech.audio.done");
    EXPECT_TRUE(sse_bytes == stream.body) << "SSE deltas differ from the raw stream";
    // A streamed WAV or FLAC header cannot know the length; everything after it is the same.
    ASSERT_EQ(stream.body.size(), file.body.size());
    const size_t header = format == "wav" ? 44 : format == "flac" ? 42 : 0;
    EXPECT_TRUE(stream.body.compare(header, std::string::npos, file.body, header, std::string::npos) == 0)
        << "the concatenated stream differs from the file";

    if (format == "pcm") {
      ASSERT_EQ(file.body.size() % (2 * kSamplesPerFrame), 0u);
      const size_t frames = file.body.size() / (2 * kSamplesPerFrame);
      EXPECT_GE(frames, 1u);
      EXPECT_LE(frames, static_cast<size_t>(kMaxFrames));
      // qwen3_tts.yaml's initial_codec_chunk_frames 1: the first frame is sent on its own, before
      // the talker has finished, so more than one frame means more than one delta.
      if (frames > 1) {
        EXPECT_GE(events.size(), 3u) << "deltas and the done event";
        EXPECT_EQ(base64_decode(Json::parse(events[0])["audio"].get<std::string>()).size(), 2u * kSamplesPerFrame)
            << "code2wav decoded the first frame on its own";
      }
      continue;
    }
    DecodedAudio audio = decode_audio(file.body);
    EXPECT_EQ(audio.channels, 1);
    EXPECT_EQ(audio.sample_rate, format == "opus" ? 48000 : kRate);  // Opus always decodes at 48 kHz
    EXPECT_FALSE(audio.samples.empty());
    if (format == "wav" || format == "flac") {
      EXPECT_EQ(audio.samples.size() % kSamplesPerFrame, 0u);
      EXPECT_LE(audio.samples.size(), static_cast<size_t>(kMaxFrames) * kSamplesPerFrame);
    }
  }
}

TEST_F(TtsServeTest, TheSeedDecidesTheSampledAudio) {
  Json body = {{"input", "Seeds matter."}, {"voice", "ryan"}, {"response_format", "pcm"}, {"seed", 1}};
  HttpResult one = speech(body);
  ASSERT_EQ(one.status, 200) << one.body;
  body["seed"] = 2;
  HttpResult two = speech(body);
  ASSERT_EQ(two.status, 200) << two.body;
  EXPECT_FALSE(one.body == two.body) << "the talker samples with temperature 0.9 by default";
}

TEST_F(TtsServeTest, SpeedStretchesTheFileAndMustBeOneWhenStreamed) {
  Json body = {{"input", "Faster and slower."}, {"voice", "aiden"}, {"response_format", "pcm"}, {"seed", 11}};
  HttpResult normal = speech(body);
  ASSERT_EQ(normal.status, 200) << normal.body;
  const size_t samples = normal.body.size() / 2;
  ASSERT_GT(samples, 0u);
  for (double speed : {0.5, 2.0}) {
    SCOPED_TRACE(speed);
    body["speed"] = speed;
    HttpResult stretched = speech(body);
    ASSERT_EQ(stretched.status, 200) << stretched.body;
    EXPECT_EQ(stretched.body.size() / 2, static_cast<size_t>(std::llround(static_cast<double>(samples) / speed)));
  }
  body["response_format"] = "wav";
  HttpResult wav = speech(body);
  ASSERT_EQ(wav.status, 200) << wav.body;
  DecodedAudio audio = decode_audio(wav.body);
  EXPECT_EQ(audio.sample_rate, kRate);
  EXPECT_EQ(audio.samples.size(), static_cast<size_t>(std::llround(static_cast<double>(samples) / 2.0)));

  body["stream"] = true;
  HttpResult streamed = speech(body);
  EXPECT_EQ(streamed.status, 400) << streamed.body;
  EXPECT_EQ(Json::parse(streamed.body)["error"]["param"], "speed") << streamed.body;
}

TEST_F(TtsServeTest, AMissingVoiceSpeaksAsVivianAndTheTaskIsTheCheckpoints) {
  Json body = {{"input", "Who is speaking?"}, {"response_format", "pcm"}, {"seed", 5}};
  HttpResult unnamed = speech(body);
  ASSERT_EQ(unnamed.status, 200) << unnamed.body;
  body["voice"] = "Vivian";
  HttpResult vivian = speech(body);
  ASSERT_EQ(vivian.status, 200) << vivian.body;
  EXPECT_TRUE(unnamed.body == vivian.body) << "vLLM-Omni's default voice is Vivian";

  body["task_type"] = "VoiceDesign";
  body["instructions"] = "A calm voice.";
  HttpResult design = speech(body);
  EXPECT_EQ(design.status, 400) << design.body;
  EXPECT_EQ(Json::parse(design.body)["error"]["param"], "task_type") << design.body;
}

TEST_F(TtsServeTest, NonStreamingModeChoosesThePromptLayout) {
  Json body = {{"input", "Layouts differ."}, {"voice", "serena"}, {"response_format", "pcm"}, {"seed", 9}};
  HttpResult by_default = speech(body);
  ASSERT_EQ(by_default.status, 200) << by_default.body;
  body["non_streaming_mode"] = true;
  HttpResult non_streaming = speech(body);
  body["non_streaming_mode"] = false;
  HttpResult streaming = speech(body);
  ASSERT_EQ(streaming.status, 200) << streaming.body;
  EXPECT_TRUE(by_default.body == non_streaming.body) << "CustomVoice lays the text out non-streaming by default";
  EXPECT_FALSE(streaming.body == non_streaming.body) << "the streaming layout is another prompt";
}

TEST_F(TtsServeTest, BadRequestsAre400WithAnOpenAiError) {
  struct Case {
    Json body;
    std::string param;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {{{"input", ""}}, "input", "'input' is empty"},
      {{{"input", "hi"}, {"voice", "nobody"}}, "voice", "unknown voice 'nobody'"},
      {{{"input", "hi"}, {"response_format", "ogg"}}, "response_format", "wav, pcm, flac, mp3, opus, aac"},
      {{{"input", "hi"}, {"instructions", std::string(501, 'i')}}, "instructions", "the limit is 500"},
  };
  for (const Case& c : cases) {
    HttpResult reply = speech(c.body);
    SCOPED_TRACE(c.body.dump().substr(0, 80));
    EXPECT_EQ(reply.status, 400) << reply.body;
    Json error = Json::parse(reply.body)["error"];
    EXPECT_EQ(error["code"], 400);
    EXPECT_EQ(error["param"], c.param);
    EXPECT_NE(error["message"].get<std::string>().find(c.message_part), std::string::npos) << reply.body;
  }
  HttpResult after = speech({{"input", "still fine"}, {"voice", "serena"}, {"response_format", "pcm"}, {"seed", 3}});
  EXPECT_EQ(after.status, 200) << after.body;
}

TEST_F(TtsServeTest, OpenAiClientAudioSpeechCreate) {
  const std::string modules = std::string(OMNI_SOURCE_DIR) + "/third_party/npm/node_modules";
  ASSERT_TRUE(fs::exists(modules + "/openai/package.json")) << "run scripts/install-deps";
  // The client sends the key as a bearer token; serve requires it.
  ProcessResult result =
      run_process({"/usr/bin/node", std::string(OMNI_SOURCE_DIR) + "/tests/integration/speech_client.cjs",
                   server_->url("/v1"), kModelName, Json({{"max_new_tokens", kMaxFrames}, {"seed", 4}}).dump()},
                  {"NODE_PATH=" + modules, std::string("OPENAI_API_KEY=") + kApiKey});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  Json out = Json::parse(result.out);
  EXPECT_EQ(out["content_type"], "audio/wav");
  DecodedAudio wav = decode_audio(base64_decode(out["wav_base64"].get<std::string>()));
  EXPECT_EQ(wav.sample_rate, kRate);
  EXPECT_EQ(wav.samples.size() % kSamplesPerFrame, 0u);
  EXPECT_GE(wav.samples.size(), static_cast<size_t>(kSamplesPerFrame));
  EXPECT_EQ(base64_decode(out["mp3_base64"].get<std::string>()).substr(0, 1), "\xff");
  EXPECT_EQ(out["error_status"], 400);
  EXPECT_NE(out["error_message"].get<std::string>().find("unknown voice"), std::string::npos);
}

// `omnistage bench serve --endpoint /v1/audio/speech` against the real server, both stream
// formats: exactly N frames per request (ignore_eos), so every duration is N x 80 ms, RTF is E2E
// over that duration, and the server's own stage hops come with the report.
TEST_F(TtsServeTest, BenchServeSpeechReportsTtfpRtfAndAudioThroughput) {
  constexpr int kFrames = 6;
  constexpr int kRequests = 4;
  constexpr double kDuration = kFrames * 0.08;
  for (const std::string format : {"audio", "sse"}) {
    SCOPED_TRACE(format);
    const fs::path result_file = dir_->path() / ("bench_" + format + ".json");
    ProcessResult run = run_process({OMNISTAGE_BINARY,
                                     "bench",
                                     "serve",
                                     "--base-url",
                                     server_->url(""),
                                     "--api-key",
                                     kApiKey,
                                     "--endpoint",
                                     "/v1/audio/speech",
                                     "--speech-stream-format",
                                     format,
                                     "--voice",
                                     "vivian",
                                     "--num-prompts",
                                     std::to_string(kRequests),
                                     "--max-concurrency",
                                     "2",
                                     "--random-input-len",
                                     "5",
                                     "--random-output-len",
                                     std::to_string(kFrames),
                                     "--ignore-eos",
                                     "--result-file",
                                     result_file.string()});
    ASSERT_EQ(run.exit_code, 0) << run.err << run.out;
    EXPECT_NE(run.out.find("Audio throughput (audio-s/s):"), std::string::npos) << run.out;
    EXPECT_NE(run.out.find("Mean TTFP (ms):"), std::string::npos) << run.out;
    EXPECT_NE(run.out.find("Mean RTF:"), std::string::npos) << run.out;
    const Json report = Json::parse(read_file(result_file));
    EXPECT_EQ(report["endpoint"], "/v1/audio/speech");
    EXPECT_EQ(report["completed"], kRequests);
    EXPECT_EQ(report["failed"], 0) << report["errors"].dump();
    ASSERT_EQ(report["audio_durations"].size(), static_cast<size_t>(kRequests));
    for (size_t i = 0; i < kRequests; ++i) {
      EXPECT_NEAR(report["audio_durations"][i].get<double>(), kDuration, 1e-9) << i;
      EXPECT_GT(report["ttfps"][i].get<double>(), 0.0) << i;
      EXPECT_GT(report["rtfs"][i].get<double>(), 0.0) << i;
    }
    EXPECT_NEAR(report["total_audio_duration_s"].get<double>(), kRequests * kDuration, 1e-9);
    EXPECT_NEAR(report["audio_throughput"].get<double>(),
                report["total_audio_duration_s"].get<double>() / report["duration"].get<double>(), 1e-9);
    // Every duration is the same, so the mean RTF is the mean E2E latency over it.
    EXPECT_NEAR(report["mean_rtf"].get<double>(), report["mean_e2el_ms"].get<double>() / 1000.0 / kDuration, 1e-9);
    for (const char* stat : {"mean", "median", "p99"}) {
      EXPECT_GT(report[std::string(stat) + "_ttfp_ms"].get<double>(), 0.0) << stat;
      EXPECT_LE(report[std::string(stat) + "_ttfp_ms"].get<double>(),
                report[std::string(stat) + "_e2el_ms"].get<double>())
          << stat;
      EXPECT_GT(report[std::string(stat) + "_rtf"].get<double>(), 0.0) << stat;
    }
    EXPECT_FALSE(report.contains("mean_ttft_ms"));
    // The server's own time: the stage hops and the talker's steps split into its two parts, one
    // observation of each per step of 1..2 requests (kFrames steps per request).
    const Json& server = report["server_time"];
    bool hop = false;
    for (const auto& [series, stats] : server.items()) {
      if (series.starts_with("omnistage:stage_hop_seconds")) hop = hop || stats["count"].get<double>() > 0;
    }
    EXPECT_TRUE(hop) << server.dump();
    for (const char* part : {"talker", "code_predictor"}) {
      const std::string series = std::string("omnistage:stage_step_seconds{stage=\"0\",part=\"") + part + "\"}";
      ASSERT_TRUE(server.contains(series)) << series << " in " << server.dump();
      EXPECT_GE(server[series]["count"].get<double>(), kFrames * kRequests / 2.0) << series;
      EXPECT_LE(server[series]["count"].get<double>(), kFrames * kRequests + kRequests) << series;
      EXPECT_GT(server[series]["mean_ms"].get<double>(), 0.0) << series;
    }
    // Each stage takes each request once (add_request); the last ones may still be on their way.
    for (const char* stage : {"0", "1"}) {
      const std::string series =
          std::string("omnistage:stage_step_seconds{stage=\"") + stage + "\",part=\"add_request\"}";
      ASSERT_TRUE(server.contains(series)) << series << " in " << server.dump();
      EXPECT_GE(server[series]["count"].get<double>(), 1.0) << series;
      EXPECT_LE(server[series]["count"].get<double>(), static_cast<double>(kRequests)) << series;
    }
  }
}

// Last in the suite: it ends the shared server.
TEST_F(TtsServeTest, ZzShutdownLeavesNoStageProcessOrSharedMemory) {
  const std::vector<pid_t> stages = children_of(server_->pid());
  EXPECT_EQ(stages.size(), 2u) << "talker and code2wav";
  EXPECT_EQ(server_->terminate(30s), 0) << server_->log();
  for (pid_t stage : stages) EXPECT_FALSE(process_exists(stage)) << "stage process " << stage << " outlived serve";
  EXPECT_TRUE(shm_entries("omnistage_" + server_->session()).empty()) << server_->session();
}

}  // namespace
}  // namespace omni::testing
