// POST /v1/audio/speech and GET /v1/audio/voices on the real ApiServer, in front of a backend that
// answers with a known tone: every format, streamed (raw and SSE) and not, read back with FFmpeg;
// what reaches the backend; speed; the default voice; the 400s; errors before and after the audio
// starts; disconnects.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "base/base64.h"
#include "base/error.h"
#include "media/audio_decoder.h"
#include "media/audio_encoder.h"
#include "media/pcm16.h"
#include "media/time_stretch.h"
#include "server/api_server.h"
#include "server/test_server.h"
#include "server/tone_backend.h"

namespace omni::testing {
namespace {

using media::decode_audio;
using media::DecodedAudio;

using namespace std::chrono_literals;

constexpr const char* kText = "Hello!";  // 6 characters: 6 frames
constexpr size_t kFrames = 6;

class SpeechApiTest : public ::testing::Test {
 protected:
  void start(std::chrono::milliseconds chunk_delay = 1ms, std::vector<std::string> voices = {"Vivian", "aiden", "ryan"},
             std::string task_type = "") {
    if (server_) server_->stop();
    server_.reset();
    backend_ = std::make_unique<ToneBackend>(chunk_delay);
    server::ApiServerOptions options;
    options.port = 0;
    options.served_model_names = {"tts"};
    options.model_path = "/models/tts";
    options.version = "test";
    options.speech.voices = std::move(voices);
    options.speech.task_type = std::move(task_type);
    options.speech.max_instructions_length = 20;
    server_ = std::make_unique<server::ApiServer>(options, *backend_, nullptr, metrics_);
    server_->start();
  }

  void TearDown() override {
    if (server_) server_->stop();
    server_.reset();
    backend_.reset();
  }

  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(server_->port()) + path;
  }

  CurlReply speech(Json body) const {
    if (!body.contains("input")) body["input"] = kText;
    return run_curl({"-H", "Content-Type: application/json", "--data-binary", body.dump(), url("/v1/audio/speech")});
  }

  // A 400 naming `param` whose message contains `text`.
  void expect_invalid(const Json& body, const std::string& param, const std::string& text) const {
    CurlReply reply = speech(body);
    EXPECT_EQ(reply.status, 400) << body.dump() << " -> " << reply.body;
    Json error = Json::parse(reply.body)["error"];
    EXPECT_EQ(error["param"], param) << reply.body;
    EXPECT_EQ(error["type"], "invalid_argument");
    EXPECT_EQ(error["code"], 400);
    EXPECT_NE(error["message"].get<std::string>().find(text), std::string::npos) << error["message"];
  }

  MetricsRegistry metrics_;
  std::unique_ptr<ToneBackend> backend_;
  std::unique_ptr<server::ApiServer> server_;
};

std::vector<float> pcm_samples(const std::string& bytes) {
  std::vector<float> out;
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    int16_t value = static_cast<int16_t>(static_cast<uint8_t>(bytes[i]) | (static_cast<uint8_t>(bytes[i + 1]) << 8));
    out.push_back(static_cast<float>(value) / 32768.0f);
  }
  return out;
}

void expect_samples(const std::vector<float>& decoded, const std::vector<float>& expected) {
  ASSERT_EQ(decoded.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(std::lrint(decoded[i] * 32768.0f), media::to_pcm16(expected[i])) << "sample " << i;
  }
}

TEST_F(SpeechApiTest, VoicesListsTheCheckpointSpeakers) {
  start();
  CurlReply reply = run_curl({url("/v1/audio/voices")});
  ASSERT_EQ(reply.status, 200);
  EXPECT_EQ(reply.json(), Json::parse(R"({"voices": ["Vivian", "aiden", "ryan"], "uploaded_voices": []})"));
}

TEST_F(SpeechApiTest, WavFileHoldsTheToneAtTwentyFourKilohertzMono) {
  start();
  CurlReply reply = speech({{"model", "tts"}, {"voice", "vivian"}, {"response_format", "wav"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_TRUE(reply.has_header("content-type: audio/wav")) << reply.headers;
  DecodedAudio audio = decode_audio(reply.body);
  EXPECT_EQ(audio.sample_rate, 24000);
  EXPECT_EQ(audio.channels, 1);
  EXPECT_EQ(audio.samples.size(), kFrames * kToneSamplesPerFrame);
  expect_samples(audio.samples, ToneBackend::expected_samples(kText, std::nullopt));
  // The first audio is the first output: speech requests have a time to first token.
  const std::string metrics = run_curl({url("/metrics")}).body;
  EXPECT_EQ(metric_value(metrics, "vllm:time_to_first_token_seconds_count{model_name=\"tts\"}"), 1);
  EXPECT_EQ(metric_value(metrics, "vllm:inter_token_latency_seconds_count{model_name=\"tts\"}"),
            3);  // 4 chunks: 1, 2, 2, 1 frames
}

TEST_F(SpeechApiTest, TheBackendGetsTheFieldsAsAdditionalInformation) {
  start();
  CurlReply reply = speech({{"voice", "VIVIAN"},
                            {"response_format", "pcm"},
                            {"task_type", "customvoice"},
                            {"language", "English"},
                            {"instructions", "calm"},
                            {"max_new_tokens", 4},
                            {"seed", 7},
                            {"initial_codec_chunk_frames", 3},
                            {"non_streaming_mode", false},
                            {"speed", 1.0}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  auto submitted = backend_->submitted();
  ASSERT_EQ(submitted.size(), 1u);
  const runtime::GenerationRequest& request = submitted[0];
  EXPECT_EQ(request.request_id.rfind("speech-", 0), 0u);
  EXPECT_TRUE(request.prompt_token_ids.empty());
  EXPECT_EQ(request.output_modalities, std::vector<std::string>{"audio"});
  EXPECT_EQ(request.additional_information, Json({{"text", kText},
                                                  {"voice", "Vivian"},
                                                  {"task_type", "CustomVoice"},
                                                  {"language", "English"},
                                                  {"instructions", "calm"},
                                                  {"initial_codec_chunk_frames", 3},
                                                  {"non_streaming_mode", false}}));
  // max_new_tokens and seed travel once, in the talker's sampling parameters.
  ASSERT_EQ(request.sampling_params_list.size(), 1u);
  EXPECT_EQ(request.sampling_params_list[0], Json({{"max_tokens", 4}, {"seed", 7}}));
  // max_new_tokens caps the frames; the seed picks the tone.
  expect_samples(pcm_samples(reply.body), ToneBackend::expected_samples(kText, 7, 4));
}

TEST_F(SpeechApiTest, EveryFormatStreamedEqualsTheFile) {
  start();
  const std::vector<float> expected = ToneBackend::expected_samples(kText, 3);
  for (media::AudioFormat format : media::audio_formats()) {
    const std::string name(media::audio_format_name(format));
    SCOPED_TRACE(name);
    CurlReply file = speech({{"response_format", name}, {"seed", 3}});
    ASSERT_EQ(file.status, 200) << file.body;
    EXPECT_TRUE(file.has_header("content-type: " + std::string(media::audio_content_type(format)))) << file.headers;
    CurlReply stream = speech({{"response_format", name}, {"seed", 3}, {"stream", true}});
    ASSERT_EQ(stream.status, 200) << stream.body;
    EXPECT_TRUE(stream.has_header("transfer-encoding: chunked")) << stream.headers;
    EXPECT_TRUE(stream.has_header("content-type: " + std::string(media::audio_content_type(format))));
    ASSERT_EQ(stream.body.size(), file.body.size());
    if (format == media::AudioFormat::kWav) {
      EXPECT_EQ(stream.body.substr(44), file.body.substr(44));
      EXPECT_EQ(stream.body.substr(40, 4), std::string(4, '\xff'));
    } else if (format == media::AudioFormat::kFlac) {
      EXPECT_EQ(stream.body.substr(42), file.body.substr(42));
    } else {
      EXPECT_EQ(stream.body, file.body);
    }
    if (format == media::AudioFormat::kPcm) {
      expect_samples(pcm_samples(file.body), expected);
      continue;
    }
    DecodedAudio audio = decode_audio(stream.body);
    EXPECT_EQ(audio.channels, 1);
    EXPECT_EQ(audio.sample_rate, format == media::AudioFormat::kOpus ? 48000 : 24000);
    if (format == media::AudioFormat::kWav || format == media::AudioFormat::kFlac) {
      expect_samples(audio.samples, expected);
    } else {
      EXPECT_GE(audio.samples.size(), expected.size() * audio.sample_rate / 24000 - 960);
    }
  }
}

TEST_F(SpeechApiTest, SseDeltasCarryTheStreamInBase64ThenADoneEvent) {
  start();
  CurlReply raw = speech({{"response_format", "pcm"}, {"stream", true}, {"initial_codec_chunk_frames", 1}});
  CurlReply sse = speech(
      {{"response_format", "pcm"}, {"stream", true}, {"stream_format", "sse"}, {"initial_codec_chunk_frames", 1}});
  ASSERT_EQ(sse.status, 200) << sse.body;
  EXPECT_TRUE(sse.has_header("content-type: text/event-stream")) << sse.headers;
  std::vector<std::string> events = sse_payloads(sse.body);
  ASSERT_GE(events.size(), 3u);
  std::string audio;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    Json event = Json::parse(events[i]);
    EXPECT_EQ(event["type"], "speech.audio.delta");
    audio += base64_decode(event["audio"].get<std::string>());
    // The first chunk is initial_codec_chunk_frames (1) frame: the first audio goes out at once.
    if (i == 0) EXPECT_EQ(base64_decode(event["audio"].get<std::string>()).size(), 2u * kToneSamplesPerFrame);
  }
  EXPECT_EQ(audio, raw.body);
  Json done = Json::parse(events.back());
  EXPECT_EQ(done["type"], "speech.audio.done");
  EXPECT_EQ(done["usage"]["output_tokens"], kFrames);
  // stream_format "sse" streams without "stream": true, as OpenAI's does.
  CurlReply implied = speech({{"response_format", "pcm"}, {"stream_format", "sse"}});
  EXPECT_TRUE(implied.has_header("content-type: text/event-stream")) << implied.headers;
}

TEST_F(SpeechApiTest, BadRequestsAreOpenAiErrorsNamingTheField) {
  start();
  expect_invalid({{"input", ""}}, "input", "'input' is empty");
  expect_invalid({{"input", "  \n"}}, "input", "'input' is empty");
  expect_invalid(Json::object({{"voice", "vivian"}, {"input", nullptr}}), "input", "'input' is required");
  expect_invalid({{"voice", "nobody"}}, "voice", "unknown voice 'nobody'; this model's voices: Vivian, aiden, ryan");
  expect_invalid({{"response_format", "ogg"}}, "response_format",
                 "unknown response_format 'ogg'; allowed: wav, pcm, flac, mp3, opus, aac");
  expect_invalid({{"instructions", std::string(21, 'x')}}, "instructions",
                 "'instructions' is 21 characters long; the limit is 20 (--tts-max-instructions-length)");
  expect_invalid({{"speed", 5.0}}, "speed", "'speed' must be in [0.25, 4], got 5");
  expect_invalid({{"speed", 1.5}, {"stream", true}}, "speed", "'speed' 1.5 cannot be streamed");
  expect_invalid({{"speed", 0.5}, {"stream_format", "sse"}}, "speed", "needs speed 1.0");
  expect_invalid({{"task_type", "VoiceDesign"}}, "instructions", "'instructions' is required for VoiceDesign");
  expect_invalid({{"speaker_embedding", {0.5, 0.25}}}, "speaker_embedding", "only valid for task_type Base");
  expect_invalid({{"non_streaming_mode", "no"}}, "non_streaming_mode", "must be a boolean");
  expect_invalid({{"stream_format", "chunks"}}, "stream_format", "allowed: sse, audio");
  expect_invalid({{"task_type", "Clone"}}, "task_type", "allowed: CustomVoice, VoiceDesign, Base");
  expect_invalid({{"ref_audio", "https://example.com/a.wav"}}, "ref_audio", "only valid for task_type Base");
  expect_invalid({{"ref_text", "hi"}}, "ref_text", "only valid for task_type Base");
  expect_invalid({{"x_vector_only_mode", true}}, "x_vector_only_mode", "only valid for task_type Base");
  expect_invalid({{"max_new_tokens", 0}}, "max_new_tokens", "at least 1");
  expect_invalid({{"initial_codec_chunk_frames", 0}}, "initial_codec_chunk_frames", "at least 1");
  expect_invalid({{"seed", "x"}}, "seed", "must be an integer");
  // Characters, not bytes: 20 two-byte characters are within the limit.
  std::string umlauts;
  for (int i = 0; i < 20; ++i) umlauts += "\xc3\xa4";
  EXPECT_EQ(speech({{"instructions", umlauts}}).status, 200);
  CurlReply unknown_model = speech({{"model", "other"}});
  EXPECT_EQ(unknown_model.status, 404);
  EXPECT_TRUE(backend_->submitted().size() == 1u);
}

TEST_F(SpeechApiTest, SpeedStretchesTheWholeUtteranceBeforeEncoding) {
  start();
  const std::vector<float> tone = ToneBackend::expected_samples(kText, std::nullopt);
  for (double speed : {0.5, 1.5, 4.0}) {
    SCOPED_TRACE(speed);
    CurlReply reply = speech({{"response_format", "pcm"}, {"speed", speed}});
    ASSERT_EQ(reply.status, 200) << reply.body;
    // The whole utterance in one stretch (the backend sends it in four chunks): the samples of
    // media::time_stretch, whose length is round(frames * 1920 / speed).
    const std::vector<float> stretched = media::time_stretch(tone, speed, kToneSampleRate);
    EXPECT_EQ(stretched.size(), static_cast<size_t>(std::llround(kFrames * kToneSamplesPerFrame / speed)));
    expect_samples(pcm_samples(reply.body), stretched);
  }
  // Every format carries the stretched length; speed 1 leaves the audio as it is.
  CurlReply wav = speech({{"response_format", "wav"}, {"speed", 2.0}});
  ASSERT_EQ(wav.status, 200) << wav.body;
  EXPECT_EQ(decode_audio(wav.body).samples.size(), kFrames * kToneSamplesPerFrame / 2);
  CurlReply same = speech({{"response_format", "pcm"}, {"speed", 1.0}});
  expect_samples(pcm_samples(same.body), tone);
}

TEST_F(SpeechApiTest, AMissingVoiceIsVivianOrA400NamingTheVoices) {
  // vLLM-Omni's default speaker, as the checkpoint spells it.
  start(1ms, {"aiden", "vivian"}, "CustomVoice");
  ASSERT_EQ(speech({{"response_format", "pcm"}}).status, 200);
  EXPECT_EQ(backend_->submitted().at(0).additional_information["voice"], "vivian");
  // The checkpoint's own task is the only one it serves.
  expect_invalid({{"task_type", "Base"}}, "task_type",
                 "this model is a CustomVoice checkpoint; use task_type 'CustomVoice'");

  // Without a Vivian the request must name a voice, before anything reaches the pipeline.
  start(1ms, {"aiden", "ryan"}, "CustomVoice");
  expect_invalid(Json::object(), "voice",
                 "'voice' is required: this model has no 'Vivian' to default to; its voices: aiden, ryan");
  EXPECT_TRUE(backend_->submitted().empty());

  // A Base checkpoint needs no voice, and takes the speaker embedding.
  start(1ms, {}, "Base");
  ASSERT_EQ(speech({{"speaker_embedding", {0.5, 0.25}}, {"response_format", "pcm"}}).status, 200);
  EXPECT_EQ(backend_->submitted().at(0).additional_information.count("voice"), 0u);
  EXPECT_EQ(backend_->submitted().at(0).additional_information["speaker_embedding"], Json({0.5, 0.25}));
}

TEST_F(SpeechApiTest, ErrorBeforeAudioIsAStatusAndAfterItEndsTheStream) {
  start();
  // "FAIL…" fails after its first chunk: a file request has no audio sent yet and gets the status.
  CurlReply file = speech({{"input", "FAIL now"}});
  EXPECT_EQ(file.status, 500) << file.body;
  EXPECT_NE(file.body.find("failed as asked"), std::string::npos);
  CurlReply sse = speech({{"input", "FAIL now"}, {"stream_format", "sse"}, {"response_format", "pcm"}});
  EXPECT_EQ(sse.status, 200);
  std::vector<std::string> events = sse_payloads(sse.body);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(Json::parse(events[0])["type"], "speech.audio.delta");
  EXPECT_NE(Json::parse(events[1])["error"]["message"].get<std::string>().find("failed as asked"), std::string::npos);
}

TEST_F(SpeechApiTest, ClientDisconnectAbortsTheRequest) {
  start(200ms);
  // 40 frames at 2 frames per 200 ms take 4 s; curl gives up after 0.5 s.
  CurlReply reply =
      run_curl({"--max-time", "0.5", "-H", "Content-Type: application/json", "--data-binary",
                Json({{"input", std::string(40, 'a')}, {"stream", true}}).dump(), url("/v1/audio/speech")});
  EXPECT_NE(reply.exit_code, 0);
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (backend_->aborted().empty() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(backend_->aborted().size(), 1u);
  EXPECT_EQ(backend_->aborted()[0], backend_->submitted()[0].request_id);
}

}  // namespace
}  // namespace omni::testing
