// `omnistage serve` of the random-weight Qwen3-Omni demo checkpoint (`demo-model --arch
// qwen3_omni`, the Instruct layout with enable_audio_output) with the bundled deploy YAML: all
// three stages serve. Text chats (modalities ["text"]: the talker and code2wav do not run) stream
// and not, list content reaches the content-part template of Qwen3-Omni, media needs
// --limit-mm-per-prompt. Spoken replies (Qwen3OmniSpeechServeTest): text and audio in one request,
// the audio streamed while the thinker still writes and equal to the non-streamed audio, audio
// alone, the voices (GET /v1/audio/voices, audio.voice any case, a 400 for an unknown one), the
// OpenAI npm client, and the same audio from a server started with --no-async-chunk (the talker
// fed once the thinker finished). Chats with audio (input_audio, audio_url data: and file://
// URLs, with curl and the OpenAI npm client) reach the thinker's audio tower through a second
// server started with --limit-mm-per-prompt and --allowed-local-media-path; so do chats with images
// (image_url data: and file:// URLs, with curl and the OpenAI npm client), which reach its vision
// encoder; and a chat with an image and audio asking for text and audio gets both, streamed and not.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <numbers>
#include <string>
#include <thread>

#include "base/base64.h"
#include "base/json.h"
#include "integration/serve_process.h"
#include "media/audio_decoder.h"
#include "media/image_encoder.h"
#include "media/video_fixture.h"
#include "media/wav_encoder.h"

namespace omni::testing {
namespace {

inline constexpr char kQwen3OmniArch[] = "qwen3_omni";

class Qwen3OmniServeTest : public DemoServerSuite<kQwen3OmniArch> {
 protected:
  static Json chat(const Json& content, int max_tokens = 4) {
    return {{"model", kModelName},      {"messages", {{{"role", "user"}, {"content", content}}}},
            {"max_tokens", max_tokens}, {"temperature", 0},
            {"ignore_eos", true},       {"modalities", {"text"}}};
  }
};

TEST_F(Qwen3OmniServeTest, AllThreeStagesServe) {
  const std::string log = read_file(dir_->path() / "serve.log");
  for (const char* ready : {"stage 0 replica 0 ready", "stage 1 replica 0 ready", "stage 2 replica 0 ready"}) {
    EXPECT_NE(log.find(ready), std::string::npos) << log;
  }
  EXPECT_EQ(log.find("have no stage model in omnistage yet"), std::string::npos) << log;
  EXPECT_NE(log.find("chat message content is rendered in the openai format (detected from the chat template)"),
            std::string::npos)
      << log;
}

TEST_F(Qwen3OmniServeTest, TextChatsStreamedAndNot) {
  HttpResult whole = curl(*server_, "/v1/chat/completions", chat("Hello there").dump());
  ASSERT_EQ(whole.status, 200) << whole.body;
  const Json reply = Json::parse(whole.body);
  EXPECT_EQ(reply["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(reply["usage"]["completion_tokens"], 4);
  // <|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n
  EXPECT_GT(reply["usage"]["prompt_tokens"].get<int>(), 8);

  Json stream = chat("Hello there");
  stream["stream"] = true;
  HttpResult streamed = curl(*server_, "/v1/chat/completions", stream.dump());
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  std::string text;
  for (const Json& event : sse_events(streamed.body)) {
    if (!event["choices"].empty() && event["choices"][0]["delta"].contains("content")) {
      text += event["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(text, reply["choices"][0]["message"]["content"]) << "greedy streamed text equals the non-streamed one";
}

TEST_F(Qwen3OmniServeTest, ListContentRendersLikeTheSameText) {
  HttpResult parts =
      curl(*server_, "/v1/chat/completions", chat(Json::array({{{"type", "text"}, {"text", "Hello there"}}})).dump());
  HttpResult plain = curl(*server_, "/v1/chat/completions", chat("Hello there").dump());
  ASSERT_EQ(parts.status, 200) << parts.body;
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(Json::parse(parts.body)["usage"], Json::parse(plain.body)["usage"]);
  EXPECT_EQ(Json::parse(parts.body)["choices"][0]["message"]["content"],
            Json::parse(plain.body)["choices"][0]["message"]["content"]);
}

TEST_F(Qwen3OmniServeTest, MediaInputWithoutItsLimitIsRefusedNamingThePart) {
  HttpResult sound =
      curl(*server_, "/v1/chat/completions",
           chat(Json::array({{{"type", "input_audio"}, {"input_audio", {{"data", "UklGRg=="}, {"format", "wav"}}}},
                             {{"type", "text"}, {"text", "What is this?"}}}))
               .dump());
  EXPECT_EQ(sound.status, 400) << sound.body;
  EXPECT_EQ(Json::parse(sound.body)["error"]["param"], "messages[0].content[0]") << sound.body;
  EXPECT_EQ(curl(*server_, "/health", std::nullopt).status, 200);
}

// Spoken replies. The thinker writes `thinker_tokens` tokens; the talker is greedy and bounded to
// `frames` codec frames (random weights never end on their own).
Json speech_chat(const std::string& text, int thinker_tokens, int frames) {
  return {{"model", kModelName},
          {"messages", {{{"role", "user"}, {"content", text}}}},
          {"max_tokens", thinker_tokens},
          {"temperature", 0},
          {"ignore_eos", true},
          {"sampling_params_list", {nullptr, {{"temperature", 0}, {"max_tokens", frames}}, nullptr}}};
}

struct SpokenReply {
  std::string text;
  std::vector<float> samples;
  int sample_rate = 0;
  int audio_choices = 0;
};

SpokenReply spoken(const Json& response) {
  SpokenReply out;
  for (const Json& choice : response["choices"]) {
    const Json& message = choice["message"];
    if (message.contains("audio") && message["audio"].is_object()) {
      ++out.audio_choices;
      EXPECT_TRUE(message["content"].is_null()) << response.dump();
      EXPECT_EQ(message["audio"]["transcript"], "");
      EXPECT_EQ(message["audio"]["id"].get<std::string>().rfind("audio-", 0), 0u);
      media::DecodedAudio audio = media::decode_audio(base64_decode(message["audio"]["data"].get<std::string>()));
      EXPECT_EQ(audio.container, "wav");
      out.samples = std::move(audio.samples);
      out.sample_rate = audio.sample_rate;
    } else if (message["content"].is_string()) {
      out.text += message["content"].get<std::string>();
    }
  }
  return out;
}

// The streamed reply, and where its first audio piece came: the count of text chunks before it
// and after it.
struct StreamedReply {
  SpokenReply reply;
  int text_chunks_before_audio = -1;
  int text_chunks_after_audio = 0;
};

StreamedReply streamed_spoken(const std::string& body) {
  StreamedReply out;
  int text_chunks = 0;
  for (const Json& event : sse_events(body)) {
    if (!event.contains("choices") || event["choices"].empty()) continue;
    const Json& delta = event["choices"][0]["delta"];
    if (event["modality"] == "audio") {
      if (out.text_chunks_before_audio < 0) out.text_chunks_before_audio = text_chunks;
      media::DecodedAudio piece = media::decode_audio(base64_decode(delta["content"].get<std::string>()));
      out.reply.samples.insert(out.reply.samples.end(), piece.samples.begin(), piece.samples.end());
      out.reply.sample_rate = piece.sample_rate;
      ++out.reply.audio_choices;
    } else if (delta.contains("content") && delta["content"].is_string() &&
               !delta["content"].get<std::string>().empty()) {
      out.reply.text += delta["content"].get<std::string>();
      ++text_chunks;
      if (out.text_chunks_before_audio >= 0) ++out.text_chunks_after_audio;
    }
  }
  return out;
}

// The same demo server as Qwen3OmniServeTest's, for the spoken replies.
class Qwen3OmniSpeechServeTest : public DemoServerSuite<kQwen3OmniArch> {
 protected:
  static Json post(const ServeProcess& server, const Json& body, int want_status = 200) {
    HttpResult r = curl(server, "/v1/chat/completions", body.dump());
    EXPECT_EQ(r.status, want_status) << r.body;
    return Json::parse(r.body);
  }
};

TEST_F(Qwen3OmniSpeechServeTest, TextAndAudioInOneReplyStreamedWhileTheThinkerWrites) {
  Json body = speech_chat("Tell me about the sea", 120, 12);
  body["audio"] = {{"voice", "Chelsie"}, {"format", "wav"}};
  const Json whole = post(*server_, body);
  const SpokenReply reply = spoken(whole);
  EXPECT_EQ(reply.audio_choices, 1) << whole.dump();
  EXPECT_EQ(whole["usage"]["completion_tokens"], 120) << "usage counts the thinker's tokens";
  EXPECT_FALSE(reply.text.empty());
  EXPECT_EQ(reply.sample_rate, 24000);
  // 12 frames of 1920 samples, less the decoder's edge.
  EXPECT_GT(reply.samples.size(), 10u * 1920u);
  EXPECT_LE(reply.samples.size(), 12u * 1920u);

  body["stream"] = true;
  HttpResult streamed = curl(*server_, "/v1/chat/completions", body.dump());
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const StreamedReply stream = streamed_spoken(streamed.body);
  EXPECT_EQ(stream.reply.text, reply.text) << "greedy: the same text";
  EXPECT_EQ(stream.reply.samples, reply.samples) << "the streamed pieces join into the non-streamed audio";
  EXPECT_GT(stream.reply.audio_choices, 1) << "the audio comes in pieces";
  // The talker starts on the thinker's first rows: audio arrives while the text still streams.
  EXPECT_GE(stream.text_chunks_before_audio, 1);
  EXPECT_GT(stream.text_chunks_after_audio, 10) << streamed.body.substr(0, 2000);
}

TEST_F(Qwen3OmniSpeechServeTest, AudioAloneVoicesAndTheirErrors) {
  HttpResult voices = curl(*server_, "/v1/audio/voices", std::nullopt);
  ASSERT_EQ(voices.status, 200) << voices.body;
  EXPECT_EQ(Json::parse(voices.body)["voices"], Json({"aiden", "chelsie", "ethan"}));

  Json body = speech_chat("Hi", 8, 6);
  body["modalities"] = {"audio"};
  const Json alone = post(*server_, body);
  ASSERT_EQ(alone["choices"].size(), 1u) << alone.dump();
  const SpokenReply ethan = spoken(alone);
  EXPECT_EQ(ethan.audio_choices, 1);
  EXPECT_TRUE(ethan.text.empty());

  // The default voice is Ethan; a voice is matched in any case; another voice speaks otherwise.
  body["audio"] = {{"voice", "ETHAN"}};
  EXPECT_EQ(spoken(post(*server_, body)).samples, ethan.samples);
  body["audio"] = {{"voice", "aiden"}};
  EXPECT_NE(spoken(post(*server_, body)).samples, ethan.samples);

  body["audio"] = {{"voice", "nobody"}};
  const Json unknown = post(*server_, body, 400);
  EXPECT_EQ(unknown["error"]["param"], "audio.voice") << unknown.dump();
  EXPECT_NE(unknown["error"]["message"].get<std::string>().find("aiden, chelsie, ethan"), std::string::npos);
  body["audio"] = {{"format", "aiff"}};
  EXPECT_EQ(post(*server_, body, 400)["error"]["param"], "audio.format");
  EXPECT_EQ(curl(*server_, "/health", std::nullopt).status, 200);
}

TEST_F(Qwen3OmniSpeechServeTest, OfficialOpenAiClientGetsTextAndAudio) {
  const std::string modules = std::string(OMNI_SOURCE_DIR) + "/third_party/npm/node_modules";
  Json extra = speech_chat("Hi", 10, 8);
  ProcessResult result =
      run_process({"/usr/bin/node", std::string(OMNI_SOURCE_DIR) + "/tests/server/openai_chat_audio.cjs",
                   server_->url("/v1"), kApiKey, kModelName, extra.dump()},
                  {"NODE_PATH=" + modules});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Json out = Json::parse(result.out);
  const SpokenReply whole = spoken(out["whole"]);
  EXPECT_EQ(whole.audio_choices, 1) << out.dump();
  EXPECT_GT(whole.samples.size(), 0u);
  std::vector<float> joined;
  for (const Json& piece : out["streamed"]["audio"]) {
    media::DecodedAudio decoded = media::decode_audio(base64_decode(piece.get<std::string>()));
    joined.insert(joined.end(), decoded.samples.begin(), decoded.samples.end());
  }
  EXPECT_EQ(joined, whole.samples);
  EXPECT_EQ(out["streamed"]["text"], out["whole"]["choices"][0]["message"]["content"]);
  EXPECT_EQ(out["bad_format"]["status"], 400) << out.dump();
}

TEST_F(Qwen3OmniSpeechServeTest, AClientThatHangsUpEndsTheRequest) {
  // A reply far longer than curl's patience (the talker would write 3000 frames): cut after 2 s.
  Json body = speech_chat("Tell me about the sea", 400, 3000);
  body["stream"] = true;
  HttpResult cut = curl(*server_, "/v1/chat/completions", body.dump(), {"--max-time", "2"});
  EXPECT_NE(cut.body.find("\"modality\":\"audio\""), std::string::npos) << "audio arrived before the cut";
  bool freed = false;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
       !freed && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const std::string metrics = curl(*server_, "/metrics", std::nullopt).body;
    freed = metric_series(metrics, "vllm:num_requests_running{model_name=\"" + std::string(kModelName) + "\"}") == 0;
  }
  EXPECT_TRUE(freed) << "the request is still running";
  const SpokenReply after = spoken(post(*server_, speech_chat("Hi", 8, 4)));
  EXPECT_EQ(after.audio_choices, 1);
}

TEST_F(Qwen3OmniSpeechServeTest, WithoutAsyncChunkTheTalkerGetsTheSameRowsAtTheEnd) {
  ServeProcess sync(dir_->path() / "model", dir_->path() / "sync.log", {"--no-async-chunk"});
  ASSERT_GT(sync.port(), 0) << read_file(dir_->path() / "sync.log");
  const Json body = speech_chat("Tell me about the sea", 30, 10);
  const SpokenReply chunked = spoken(post(*server_, body));
  const SpokenReply whole = spoken(post(sync, body));
  EXPECT_EQ(whole.text, chunked.text);
  ASSERT_FALSE(whole.samples.empty());
  EXPECT_EQ(whole.samples, chunked.samples);
}

// `serve --load-format dummy` of the demo checkpoint's JSON files alone (no safetensors: every stage
// makes random weights), measured by `omnistage bench serve` on the chat endpoint with text and
// audio output: each request is timed for its text (TTFT) and its audio (TTFP, RTF), and the
// talker's frames (6 each, from sampling_params_list through --extra-body) give the audio seconds.
TEST_F(Qwen3OmniSpeechServeTest, BenchServeTimesTextAndAudioOfADummyWeightsServer) {
  const fs::path model = dir_->path() / "dummy";
  fs::create_directories(model);
  for (const auto& entry : fs::directory_iterator(dir_->path() / "model")) {
    if (entry.path().extension() != ".safetensors" && entry.is_regular_file())
      fs::copy_file(entry.path(), model / entry.path().filename());
  }
  ServeProcess dummy(model, dir_->path() / "dummy.log", {"--load-format", "dummy"});
  ASSERT_GT(dummy.port(), 0) << read_file(dir_->path() / "dummy.log");
  constexpr int kRequests = 3, kFrames = 6;
  const fs::path result_file = dir_->path() / "bench_chat_audio.json";
  ProcessResult run = run_process({OMNISTAGE_BINARY,
                                   "bench",
                                   "serve",
                                   "--base-url",
                                   dummy.url(""),
                                   "--api-key",
                                   kApiKey,
                                   "--endpoint",
                                   "/v1/chat/completions",
                                   "--modalities",
                                   "text,audio",
                                   "--voice",
                                   "ethan",
                                   "--num-prompts",
                                   std::to_string(kRequests),
                                   "--max-concurrency",
                                   "2",
                                   "--random-input-len",
                                   "8",
                                   "--random-output-len",
                                   "4",
                                   "--ignore-eos",
                                   "--extra-body",
                                   R"({"sampling_params_list": [{}, {"max_tokens": 6, "ignore_eos": true}, {}]})",
                                   "--result-file",
                                   result_file.string()});
  ASSERT_EQ(run.exit_code, 0) << run.err << run.out;
  const Json report = Json::parse(read_file(result_file));
  EXPECT_EQ(report["completed"], kRequests);
  EXPECT_EQ(report["failed"], 0) << report["errors"].dump();
  ASSERT_EQ(report["audio_durations"].size(), static_cast<size_t>(kRequests));
  for (size_t i = 0; i < kRequests; ++i) {
    // 6 frames of 1920 samples at 24 kHz, less the decoder's 555-sample edge.
    EXPECT_NEAR(report["audio_durations"][i].get<double>(), (kFrames * 1920 - 555) / 24000.0, 1e-6) << i;
    EXPECT_GT(report["ttfps"][i].get<double>(), 0.0) << i;
    EXPECT_GT(report["rtfs"][i].get<double>(), 0.0) << i;
  }
  EXPECT_GT(report["mean_ttft_ms"].get<double>(), 0.0);
  EXPECT_GT(report["mean_ttfp_ms"].get<double>(), 0.0);
  EXPECT_EQ(report["total_output_tokens"], kRequests * 4) << "the thinker's 4 tokens each";
}

// A 16-bit PCM WAV of `seconds` of a 440 Hz tone at `rate`.
std::string wav_tone(int rate, double seconds) {
  const int n = static_cast<int>(std::lround(rate * seconds));
  std::string out = media::wav_header(rate, 2 * static_cast<int64_t>(n));
  for (int i = 0; i < n; ++i) {
    const auto v = static_cast<int16_t>(std::lround(9000.0 * std::sin(2 * std::numbers::pi * 440.0 * i / rate)));
    out.append(reinterpret_cast<const char*>(&v), 2);
  }
  return out;
}

Json input_audio(const std::string& wav) {
  return {{"type", "input_audio"}, {"input_audio", {{"data", base64_encode(wav)}, {"format", "wav"}}}};
}

class Qwen3OmniAudioServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    ProcessResult made = run_process(
        {OMNISTAGE_BINARY, "demo-model", "--arch", kQwen3OmniArch, "--out", (dir_->path() / "model").string()});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    fs::create_directories(dir_->path() / "media");
    server_ = std::make_unique<ServeProcess>(
        dir_->path() / "model", dir_->path() / "serve.log",
        std::vector<std::string>{"--limit-mm-per-prompt", R"({"audio": 2, "image": 2, "video": 1})",
                                 "--allowed-local-media-path", (dir_->path() / "media").string()});
  }
  static void TearDownTestSuite() {
    server_.reset();
    dir_.reset();
  }
  void SetUp() override { ASSERT_GT(server_->port(), 0) << "the server is not running"; }

  static Json chat(const Json& content) {
    return {{"model", kModelName}, {"messages", {{{"role", "user"}, {"content", content}}}},
            {"max_tokens", 4},     {"temperature", 0},
            {"ignore_eos", true},  {"modalities", {"text"}}};
  }
  static Json post(const Json& body, int want_status = 200) {
    HttpResult r = curl(*server_, "/v1/chat/completions", body.dump());
    EXPECT_EQ(r.status, want_status) << r.body;
    return Json::parse(r.body);
  }

  static inline std::unique_ptr<TempDir> dir_;
  static inline std::unique_ptr<ServeProcess> server_;
};

TEST_F(Qwen3OmniAudioServeTest, UsageCountsEachAudiosExpandedPlaceholders) {
  const Json question = {{"type", "text"}, {"text", "What is this?"}};
  const int text_only = post(chat(Json::array({question})))["usage"]["prompt_tokens"];
  // 1 s at 16 kHz: 100 feature frames, one whole chunk: 13 rows, plus <|audio_start|> and <|audio_end|>.
  const Json one = post(chat(Json::array({input_audio(wav_tone(16000, 1.0)), question})));
  EXPECT_EQ(one["usage"]["prompt_tokens"].get<int>(), text_only + 2 + 13) << one.dump();
  EXPECT_EQ(one["usage"]["completion_tokens"], 4);
  // 0.5 s at 44.1 kHz, resampled to 8000 samples: 50 frames, 7 rows, but padded to the 1 s audio
  // beside it (the features of a request's audios are computed together) its frames stay 50.
  const Json two =
      post(chat(Json::array({input_audio(wav_tone(16000, 1.0)), input_audio(wav_tone(44100, 0.5)), question})));
  EXPECT_EQ(two["usage"]["prompt_tokens"].get<int>(), text_only + 2 + 13 + 2 + 7) << two.dump();

  Json streamed = chat(Json::array({input_audio(wav_tone(16000, 1.0)), question}));
  streamed["stream"] = true;
  HttpResult r = curl(*server_, "/v1/chat/completions", streamed.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  std::string text;
  for (const Json& event : sse_events(r.body)) {
    if (!event["choices"].empty() && event["choices"][0]["delta"].contains("content")) {
      text += event["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(text, one["choices"][0]["message"]["content"]) << "greedy streamed text equals the non-streamed one";
}

TEST_F(Qwen3OmniAudioServeTest, AudioUrlsAsDataAndAllowedFilesGiveTheSameAnswer) {
  const std::string wav = wav_tone(16000, 0.8);
  const Json question = {{"type", "text"}, {"text", "Describe it."}};
  const Json inline_answer = post(chat(Json::array({input_audio(wav), question})));
  const Json data_url = post(chat(Json::array(
      {{{"type", "audio_url"}, {"audio_url", {{"url", "data:audio/wav;base64," + base64_encode(wav)}}}}, question})));
  EXPECT_EQ(data_url["choices"][0]["message"]["content"], inline_answer["choices"][0]["message"]["content"]);
  EXPECT_EQ(data_url["usage"], inline_answer["usage"]);
  const fs::path file = dir_->path() / "media" / "tone.wav";
  { std::ofstream(file, std::ios::binary) << wav; }
  const Json from_file =
      post(chat(Json::array({{{"type", "audio_url"}, {"audio_url", {{"url", "file://" + file.string()}}}}, question})));
  EXPECT_EQ(from_file["choices"][0]["message"]["content"], inline_answer["choices"][0]["message"]["content"]);

  const fs::path outside = dir_->path() / "tone.wav";
  { std::ofstream(outside, std::ios::binary) << wav; }
  const Json refused = post(
      chat(Json::array({question, {{"type", "audio_url"}, {"audio_url", {{"url", "file://" + outside.string()}}}}})),
      400);
  EXPECT_EQ(refused["error"]["param"], "messages[0].content[1].audio_url") << refused.dump();
}

TEST_F(Qwen3OmniAudioServeTest, TooManyUndecodableOrTooShortAudiosAre400sNamingThePart) {
  const std::string wav = wav_tone(16000, 0.5);
  const Json three = post(chat(Json::array({input_audio(wav), input_audio(wav), input_audio(wav)})), 400);
  EXPECT_EQ(three["error"]["param"], "messages[0].content[2]") << three.dump();
  EXPECT_NE(three["error"]["message"].get<std::string>().find("at most 2 audio part(s)"), std::string::npos);

  const Json garbage =
      post(chat(Json::array({{{"type", "text"}, {"text", "x"}}, input_audio("RIFF but not a wav")})), 400);
  EXPECT_EQ(garbage["error"]["param"], "messages[0].content[1]") << garbage.dump();

  // 100 samples: too short for one feature frame (the thinker's stage says so, naming the part).
  HttpResult tiny =
      curl(*server_, "/v1/chat/completions", chat(Json::array({input_audio(wav_tone(16000, 0.00625))})).dump());
  EXPECT_EQ(tiny.status, 400) << tiny.body;
  EXPECT_NE(tiny.body.find("messages[0].content[0]"), std::string::npos) << tiny.body;
  EXPECT_NE(tiny.body.find("too short"), std::string::npos) << tiny.body;
  EXPECT_EQ(curl(*server_, "/health", std::nullopt).status, 200);
}

TEST_F(Qwen3OmniAudioServeTest, OfficialOpenAiClientSendsAudio) {
  const std::string modules = std::string(OMNI_SOURCE_DIR) + "/third_party/npm/node_modules";
  ASSERT_TRUE(fs::exists(modules + "/openai/package.json")) << "run scripts/install-deps";
  const fs::path wav = dir_->path() / "client.wav";
  { std::ofstream(wav, std::ios::binary) << wav_tone(22050, 1.2); }
  ProcessResult result =
      run_process({"/usr/bin/node", std::string(OMNI_SOURCE_DIR) + "/tests/integration/omni_audio_client.cjs",
                   server_->url("/v1"), kApiKey, kModelName, wav.string()},
                  {"NODE_PATH=" + modules});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Json out = Json::parse(result.out);
  EXPECT_EQ(out["chat"]["usage"]["completion_tokens"], 4);
  EXPECT_EQ(out["chat_stream"]["content"], out["chat"]["content"]);
  EXPECT_EQ(out["chat_stream"]["usage"]["prompt_tokens"], out["chat"]["usage"]["prompt_tokens"]);
  EXPECT_EQ(out["audio_url"]["content"], out["chat"]["content"]);
  EXPECT_EQ(out["audio_url"]["usage"], out["chat"]["usage"]);
  EXPECT_EQ(out["bad_audio"]["status"], 400);
  EXPECT_EQ(out["bad_audio"]["param"], "messages[0].content[0]");
}

// A width x height PNG of gradients.
std::string png_picture(int width, int height) {
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      uint8_t* p = &rgb[(static_cast<size_t>(y) * width + x) * 3];
      p[0] = static_cast<uint8_t>(4 * x);
      p[1] = static_cast<uint8_t>(3 * y);
      p[2] = static_cast<uint8_t>(x * y % 256);
    }
  }
  return media::encode_image(rgb, width, height, media::ImageFormat::kPng);
}

Json image_url(const std::string& url) { return {{"type", "image_url"}, {"image_url", {{"url", url}}}}; }

TEST_F(Qwen3OmniAudioServeTest, ImagesExpandToTheirMergedPatchesAndDataAndFileUrlsAgree) {
  const Json question = {{"type", "text"}, {"text", "What is this?"}};
  const int text_only = post(chat(Json::array({question})))["usage"]["prompt_tokens"];
  // 96 x 64 pixels: 6 x 4 patches of 16, 3 x 2 merged blocks = 6 rows, plus <|vision_start|> and
  // <|vision_end|>; 100 x 70 is resized to 96 x 64 too.
  const std::string png = png_picture(96, 64);
  const Json one = post(chat(Json::array({image_url("data:image/png;base64," + base64_encode(png)), question})));
  EXPECT_EQ(one["usage"]["prompt_tokens"].get<int>(), text_only + 6 + 2) << one.dump();
  const Json two =
      post(chat(Json::array({image_url("data:image/png;base64," + base64_encode(png)),
                             image_url("data:image/png;base64," + base64_encode(png_picture(100, 70))), question})));
  EXPECT_EQ(two["usage"]["prompt_tokens"].get<int>(), text_only + 2 * (6 + 2)) << two.dump();

  const fs::path file = dir_->path() / "media" / "picture.png";
  { std::ofstream(file, std::ios::binary) << png; }
  const Json by_file = post(chat(Json::array({image_url("file://" + file.string()), question})));
  EXPECT_EQ(by_file["choices"][0]["message"]["content"], one["choices"][0]["message"]["content"]);
  EXPECT_EQ(by_file["usage"], one["usage"]);
}

// mm_processor_kwargs min_pixels and max_pixels together set the image's pixel budget at the stage:
// 96 x 64 pixels under at least 128 x 128 are scaled up to 160 x 128, 10 x 8 patches, 5 x 4 merged
// blocks = 20 rows. One of them alone changes nothing, as in transformers' Qwen2-VL processors.
TEST_F(Qwen3OmniAudioServeTest, MinAndMaxPixelsKwargsSetTheImagesGrid) {
  const Json question = {{"type", "text"}, {"text", "What is this?"}};
  const int text_only = post(chat(Json::array({question})))["usage"]["prompt_tokens"];
  Json body = chat(Json::array({image_url("data:image/png;base64," + base64_encode(png_picture(96, 64))), question}));
  body["mm_processor_kwargs"] = {{"min_pixels", 128 * 128}, {"max_pixels", 1 << 22}};
  EXPECT_EQ(post(body)["usage"]["prompt_tokens"].get<int>(), text_only + 20 + 2);
  body["mm_processor_kwargs"] = {{"min_pixels", 128 * 128}};
  EXPECT_EQ(post(body)["usage"]["prompt_tokens"].get<int>(), text_only + 6 + 2);
  body["mm_processor_kwargs"] = {{"min_pixels", 0}};
  EXPECT_EQ(post(body, 400)["error"]["param"], "mm_processor_kwargs.min_pixels");
}

TEST_F(Qwen3OmniAudioServeTest, TooManyUndecodableOrTinyImagesAre400sNamingThePart) {
  const std::string png = base64_encode(png_picture(96, 64));
  const Json three =
      post(chat(Json::array({image_url("data:image/png;base64," + png), image_url("data:image/png;base64," + png),
                             image_url("data:image/png;base64," + png)})),
           400);
  EXPECT_EQ(three["error"]["param"], "messages[0].content[2]") << three.dump();
  EXPECT_NE(three["error"]["message"].get<std::string>().find("at most 2 image part(s)"), std::string::npos);
  const Json garbage = post(
      chat(Json::array({{{"type", "text"}, {"text", "x"}}, image_url("data:image/png;base64,bm90IGFuIGltYWdl")})), 400);
  EXPECT_EQ(garbage["error"]["param"], "messages[0].content[1]") << garbage.dump();
  // 20 x 20 pixels: a side shorter than the 32 pixels of a merged patch is refused by the model.
  HttpResult tiny =
      curl(*server_, "/v1/chat/completions",
           chat(Json::array({image_url("data:image/png;base64," + base64_encode(png_picture(20, 20)))})).dump());
  EXPECT_EQ(tiny.status, 400) << tiny.body;
  EXPECT_NE(tiny.body.find("each side must be at least 32"), std::string::npos) << tiny.body;
  EXPECT_EQ(curl(*server_, "/health", std::nullopt).status, 200);
}

TEST_F(Qwen3OmniAudioServeTest, OfficialOpenAiClientSendsImages) {
  const std::string modules = std::string(OMNI_SOURCE_DIR) + "/third_party/npm/node_modules";
  ASSERT_TRUE(fs::exists(modules + "/openai/package.json")) << "run scripts/install-deps";
  const fs::path png = dir_->path() / "client.png";
  { std::ofstream(png, std::ios::binary) << png_picture(130, 90); }
  ProcessResult result =
      run_process({"/usr/bin/node", std::string(OMNI_SOURCE_DIR) + "/tests/integration/omni_image_client.cjs",
                   server_->url("/v1"), kApiKey, kModelName, png.string()},
                  {"NODE_PATH=" + modules});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Json out = Json::parse(result.out);
  EXPECT_EQ(out["chat"]["usage"]["completion_tokens"], 4);
  EXPECT_EQ(out["chat_stream"]["content"], out["chat"]["content"]);
  EXPECT_EQ(out["chat_stream"]["usage"]["prompt_tokens"], out["chat"]["usage"]["prompt_tokens"]);
  EXPECT_EQ(out["bad_image"]["status"], 400);
  EXPECT_EQ(out["bad_image"]["param"], "messages[0].content[0]");
}

TEST_F(Qwen3OmniAudioServeTest, VideoUrlsExpandToTheirSampledFramesPatches) {
  const Json question = {{"type", "text"}, {"text", "What happens?"}};
  const int text_only = post(chat(Json::array({question})))["usage"]["prompt_tokens"];
  // 3 s at 10 fps, 2 frames per second kept: 6 frames, 3 temporal patches; 64 x 48 pixels take the
  // processor's video budget of at least 128 x 32 x 32 pixels: 448 x 320, 28 x 20 patches, 14 x 10
  // merged blocks = 140 rows per temporal patch, plus <|vision_start|> and <|vision_end|>.
  const std::string mkv = flat_video(30, 10, 64, 48);
  const Json video = {{"type", "video_url"},
                      {"video_url", {{"url", "data:video/x-matroska;base64," + base64_encode(mkv)}}}};
  const Json answer = post(chat(Json::array({video, question})));
  EXPECT_EQ(answer["usage"]["prompt_tokens"].get<int>(), text_only + 3 * 140 + 2) << answer.dump();
  const Json two = post(chat(Json::array({video, video})), 400);
  EXPECT_EQ(two["error"]["param"], "messages[0].content[1]") << two.dump();
  const Json garbage =
      post(chat(Json::array({{{"type", "video_url"}, {"video_url", {{"url", "data:video/mp4;base64,AAAA"}}}}})), 400);
  EXPECT_EQ(garbage["error"]["param"], "messages[0].content[0]") << garbage.dump();
}

// mm_processor_kwargs.use_audio_in_video: the video's audio track is decoded with it and its audio
// rows are interleaved with the video's inside <|vision_start|><|audio_start|> … <|audio_end|>
// <|vision_end|>; a key the model does not take is a 400 naming it.
TEST_F(Qwen3OmniAudioServeTest, UseAudioInVideoAddsTheVideosAudioRowsAndBadKwargsAre400s) {
  const Json question = {{"type", "text"}, {"text", "What is said?"}};
  const int text_only = post(chat(Json::array({question})))["usage"]["prompt_tokens"];
  // As VideoUrlsExpandToTheirSampledFramesPatches: 3 temporal patches of 140 rows; and 2.5 s of audio
  // at 16 kHz: 250 feature frames, 13 x 2 + 7 = 33 audio rows.
  const std::string mkv = flat_video_with_tone(30, 10, 64, 48, 2.5, 16000);
  const Json video = {{"type", "video_url"},
                      {"video_url", {{"url", "data:video/x-matroska;base64," + base64_encode(mkv)}}}};
  const Json plain = post(chat(Json::array({video, question})));
  EXPECT_EQ(plain["usage"]["prompt_tokens"].get<int>(), text_only + 3 * 140 + 2) << plain.dump();
  Json body = chat(Json::array({video, question}));
  body["mm_processor_kwargs"] = {{"use_audio_in_video", true}};
  const Json with_audio = post(body);
  EXPECT_EQ(with_audio["usage"]["prompt_tokens"].get<int>(), text_only + 3 * 140 + 33 + 4) << with_audio.dump();
  EXPECT_EQ(with_audio["choices"][0]["finish_reason"], "length");

  body["mm_processor_kwargs"] = {{"use_audio_in_video", true}, {"num_frames", 4}};
  const Json unknown = post(body, 400);
  EXPECT_EQ(unknown["error"]["param"], "mm_processor_kwargs.num_frames") << unknown.dump();
  EXPECT_NE(unknown["error"]["message"].get<std::string>().find("use_audio_in_video"), std::string::npos)
      << unknown.dump();
  body["mm_processor_kwargs"] = {{"use_audio_in_video", "yes"}};
  EXPECT_EQ(post(body, 400)["error"]["param"], "mm_processor_kwargs.use_audio_in_video");
  // A video without an audio track cannot give one.
  const std::string silent = flat_video(30, 10, 64, 48);
  Json no_track = chat(Json::array(
      {{{"type", "video_url"}, {"video_url", {{"url", "data:video/x-matroska;base64," + base64_encode(silent)}}}},
       question}));
  no_track["mm_processor_kwargs"] = {{"use_audio_in_video", true}};
  EXPECT_EQ(post(no_track, 400)["error"]["param"], "messages[0].content[0]");
  // Fewer frames per second: 1 fps of 3 s is 3 frames, raised to min_frames 4: 2 temporal patches.
  body["mm_processor_kwargs"] = {{"fps", 1}};
  EXPECT_EQ(post(body)["usage"]["prompt_tokens"].get<int>(), text_only + 2 * 140 + 2);
}

// A chat with an image and an audio part that asks for text and audio: the thinker reads both
// through its towers, the talker's prompt takes their rows from the thinker's hidden states
// (hidden_projection at the placeholders), and the reply is text and speech, streamed and not;
// the streamed pieces join into the non-streamed audio (the talker greedy, bounded to kFrames).
TEST_F(Qwen3OmniAudioServeTest, AChatWithAnImageAndAudioGetsTextAndSpokenAudio) {
  constexpr int kThinkerTokens = 12, kFrames = 8;
  const Json question = {{"type", "text"}, {"text", "What do you see and hear?"}};
  const int text_only = post(chat(Json::array({question})))["usage"]["prompt_tokens"];
  Json body = speech_chat("", kThinkerTokens, kFrames);
  body["messages"][0]["content"] =
      Json::array({image_url("data:image/png;base64," + base64_encode(png_picture(96, 64))),
                   input_audio(wav_tone(16000, 1.0)), question});
  body["sampling_params_list"][1]["ignore_eos"] = true;
  body["modalities"] = {"text", "audio"};
  body["audio"] = {{"voice", "Ethan"}, {"format", "wav"}};
  const Json whole = post(body);
  // The image's 6 rows and the audio's 13, each between its start and end tokens.
  EXPECT_EQ(whole["usage"]["prompt_tokens"].get<int>(), text_only + 6 + 2 + 13 + 2) << whole.dump();
  EXPECT_EQ(whole["usage"]["completion_tokens"], kThinkerTokens) << whole.dump();
  const SpokenReply reply = spoken(whole);
  EXPECT_FALSE(reply.text.empty()) << whole.dump();
  ASSERT_EQ(reply.audio_choices, 1) << whole.dump();
  EXPECT_EQ(reply.sample_rate, 24000);
  // kFrames frames of 1920 samples, less the decoder's 555-sample edge.
  EXPECT_EQ(reply.samples.size(), static_cast<size_t>(kFrames * 1920 - 555));

  body["stream"] = true;
  HttpResult r = curl(*server_, "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const StreamedReply stream = streamed_spoken(r.body);
  EXPECT_EQ(stream.reply.text, reply.text);
  EXPECT_GT(stream.reply.audio_choices, 0) << r.body.substr(0, 2000);
  EXPECT_EQ(stream.reply.samples, reply.samples) << "the streamed pieces join into the non-streamed audio";
}

}  // namespace
}  // namespace omni::testing
