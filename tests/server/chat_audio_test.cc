// POST /v1/chat/completions with audio output on the real server, in front of the scripted
// backend's text and audio outputs: the non-streamed audio choice, the streamed audio chunks, audio
// only, and the refusals of a bad `audio` object.
#include <gtest/gtest.h>

#include <cstring>

#include "base/base64.h"
#include "media/pcm16.h"
#include "server/test_server.h"

namespace omni::testing {
namespace {

class ChatAudioTest : public ServerTest {};

const Json kMessages = {{{"role", "user"}, {"content", "hi"}}};

// The samples of a 16-bit mono WAV file; fails the test on another layout.
std::vector<int16_t> wav_samples(const std::string& file, int expected_rate = kScriptedAudioSampleRate) {
  EXPECT_GE(file.size(), 44u);
  if (file.size() < 44) return {};
  EXPECT_EQ(file.substr(0, 4), "RIFF");
  EXPECT_EQ(file.substr(8, 8), "WAVEfmt ");
  uint32_t rate = 0;
  std::memcpy(&rate, file.data() + 24, 4);
  EXPECT_EQ(rate, static_cast<uint32_t>(expected_rate));
  EXPECT_EQ(file.substr(36, 4), "data");
  uint32_t data_bytes = 0;
  std::memcpy(&data_bytes, file.data() + 40, 4);
  EXPECT_EQ(data_bytes, file.size() - 44) << "a file, with its exact length";
  std::vector<int16_t> samples((file.size() - 44) / 2);
  std::memcpy(samples.data(), file.data() + 44, samples.size() * 2);
  return samples;
}

// What the scripted backend's audio is as 16-bit samples: `chunks` pieces of 480.
std::vector<int16_t> expected_pcm(int chunks) {
  std::vector<int16_t> pcm;
  for (float sample : ScriptedBackend::audio_samples(chunks * 480)) pcm.push_back(media::to_pcm16(sample));
  return pcm;
}

Json chat_request(Json modalities, int max_tokens, Json extra = Json::object()) {
  Json body = {{"messages", kMessages}, {"max_tokens", max_tokens}};
  if (!modalities.is_null()) body["modalities"] = std::move(modalities);
  for (auto& [key, value] : extra.items()) body[key] = value;
  return body;
}

TEST_F(ChatAudioTest, NonStreamedResponseHasTheTextChoiceThenTheAudioChoice) {
  start();
  const int64_t before = std::time(nullptr);
  CurlReply reply = post("/v1/chat/completions",
                         chat_request({"text", "audio"}, 4, {{"audio", {{"voice", "Ethan"}, {"format", "wav"}}}}));
  ASSERT_EQ(reply.status, 200) << reply.body;
  Json body = reply.json();
  EXPECT_EQ(body["object"], "chat.completion");
  ASSERT_EQ(body["choices"].size(), 2u) << body.dump();
  const Json& text = body["choices"][0];
  EXPECT_EQ(text["index"], 0);
  EXPECT_EQ(text["message"], Json({{"role", "assistant"}, {"content", "abcd"}}));
  EXPECT_EQ(text["finish_reason"], "length");

  const Json& audio = body["choices"][1];
  EXPECT_EQ(audio["index"], 0) << "the audio speaks for choice 0, as vLLM-Omni numbers it";
  EXPECT_EQ(audio["finish_reason"], "stop");
  EXPECT_EQ(audio["message"]["role"], "assistant");
  EXPECT_TRUE(audio["message"]["content"].is_null());
  const Json& clip = audio["message"]["audio"];
  const std::string id = clip["id"];
  EXPECT_EQ(id.rfind("audio-", 0), 0u) << id;
  EXPECT_EQ(id.size(), 22u) << id;
  EXPECT_EQ(clip["transcript"], "");
  const int64_t expires = clip["expires_at"];
  EXPECT_GE(expires, before + 86400);
  EXPECT_LE(expires, std::time(nullptr) + 86400);
  EXPECT_EQ(wav_samples(base64_decode(clip["data"].get<std::string>())), expected_pcm(3));

  EXPECT_EQ(body["usage"], Json({{"prompt_tokens", renderer_.render_chat({{"messages", kMessages}}).size()},
                                 {"completion_tokens", 4},
                                 {"total_tokens", renderer_.render_chat({{"messages", kMessages}}).size() + 4}}));
  runtime::GenerationRequest submitted = backend_->submitted().back();
  EXPECT_EQ(submitted.additional_information, Json({{"voice", "Ethan"}})) << "only the voice goes to the stages";
  EXPECT_EQ(submitted.output_modalities, (std::vector<std::string>{"text", "audio"}));
}

struct StreamedChat {
  std::vector<Json> chunks;  // every data payload but [DONE], parsed
  std::string text;
  std::vector<std::string> audio_pieces;                      // decoded
  std::vector<std::pair<std::string, std::string>> finishes;  // (modality, finish_reason)
  bool done = false;
};

StreamedChat read_stream(const CurlReply& reply) {
  StreamedChat out;
  for (const std::string& payload : sse_payloads(reply.body)) {
    if (payload == "[DONE]") {
      out.done = true;
      continue;
    }
    Json chunk = Json::parse(payload);
    out.chunks.push_back(chunk);
    for (const Json& choice : chunk["choices"]) {
      const Json& delta = choice["delta"];
      if (chunk["modality"] == "audio") {
        EXPECT_EQ(delta["role"], "assistant");
        out.audio_pieces.push_back(base64_decode(delta["content"].get<std::string>()));
      } else if (delta.contains("content")) {
        out.text += delta["content"].get<std::string>();
      }
      if (!choice["finish_reason"].is_null()) out.finishes.emplace_back(chunk["modality"], choice["finish_reason"]);
    }
  }
  return out;
}

TEST_F(ChatAudioTest, StreamedAudioPiecesAreWavFilesWhoseSamplesMakeTheNonStreamedAudio) {
  start();
  Json request = chat_request({"text", "audio"}, 4);
  Json whole = post("/v1/chat/completions", request).json();
  const std::vector<int16_t> non_streamed =
      wav_samples(base64_decode(whole["choices"][1]["message"]["audio"]["data"].get<std::string>()));

  request["stream"] = true;
  request["stream_options"] = {{"include_usage", true}};
  CurlReply reply = post("/v1/chat/completions", request);
  ASSERT_EQ(reply.status, 200) << reply.body;
  StreamedChat stream = read_stream(reply);
  ASSERT_TRUE(stream.done);
  ASSERT_GE(stream.chunks.size(), 2u);
  EXPECT_EQ(stream.chunks[0]["modality"], "text");
  EXPECT_EQ(stream.chunks[0]["choices"][0]["delta"], Json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_EQ(stream.text, "abcd");
  ASSERT_EQ(stream.audio_pieces.size(), 3u);
  std::vector<int16_t> streamed;
  for (const std::string& piece : stream.audio_pieces) {
    std::vector<int16_t> samples = wav_samples(piece);
    EXPECT_EQ(samples.size(), 480u) << "each piece is a WAV file of its own";
    streamed.insert(streamed.end(), samples.begin(), samples.end());
  }
  EXPECT_EQ(streamed, non_streamed);
  EXPECT_EQ(streamed, expected_pcm(3));
  // The audio ends first (3 pieces, 4 tokens): the choice finishes once, with the text.
  EXPECT_EQ(stream.finishes, (std::vector<std::pair<std::string, std::string>>{{"text", "length"}}));
  const Json& usage = stream.chunks.back();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 4);
  for (size_t i = 0; i + 1 < stream.chunks.size(); ++i) {
    EXPECT_EQ(stream.chunks[i]["object"], "chat.completion.chunk");
    EXPECT_TRUE(stream.chunks[i]["usage"].is_null()) << "usage comes in the last chunk only";
  }
}

TEST_F(ChatAudioTest, TextEndingBeforeTheAudioDoesNotFinishTheStream) {
  start({.audio_chunks = 5});
  CurlReply reply =
      post("/v1/chat/completions", chat_request(nullptr, 2, {{"modalities", {"text", "audio"}}, {"stream", true}}));
  ASSERT_EQ(reply.status, 200) << reply.body;
  StreamedChat stream = read_stream(reply);
  EXPECT_EQ(stream.text, "ab");
  EXPECT_EQ(stream.audio_pieces.size(), 5u);
  EXPECT_EQ(stream.finishes, (std::vector<std::pair<std::string, std::string>>{{"audio", "stop"}}));
  ASSERT_GE(stream.chunks.size(), 1u);
  EXPECT_EQ(stream.chunks.back()["modality"], "audio") << "the finishing chunk is the last audio piece";
  EXPECT_EQ(stream.chunks.back()["choices"][0]["finish_reason"], "stop");
}

TEST_F(ChatAudioTest, PcmPiecesConcatenateToTheNonStreamedPcm) {
  start();
  Json request = chat_request({"text", "audio"}, 4, {{"audio", {{"format", "pcm16"}}}});
  Json whole = post("/v1/chat/completions", request).json();
  const std::string pcm = base64_decode(whole["choices"][1]["message"]["audio"]["data"].get<std::string>());
  std::vector<int16_t> samples(pcm.size() / 2);
  std::memcpy(samples.data(), pcm.data(), pcm.size());
  EXPECT_EQ(samples, expected_pcm(3));

  request["stream"] = true;
  StreamedChat stream = read_stream(post("/v1/chat/completions", request));
  std::string joined;
  for (const std::string& piece : stream.audio_pieces) joined += piece;
  EXPECT_EQ(joined, pcm);
}

TEST_F(ChatAudioTest, AudioOnlyHasNoTextChoiceAndNoRoleChunk) {
  start();
  Json whole = post("/v1/chat/completions", chat_request({"audio"}, 4)).json();
  ASSERT_EQ(whole["choices"].size(), 1u) << whole.dump();
  EXPECT_TRUE(whole["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(wav_samples(base64_decode(whole["choices"][0]["message"]["audio"]["data"].get<std::string>())),
            expected_pcm(3));
  EXPECT_EQ(backend_->submitted().back().output_modalities, std::vector<std::string>{"audio"});

  StreamedChat stream = read_stream(post("/v1/chat/completions", chat_request({"audio"}, 4, {{"stream", true}})));
  ASSERT_TRUE(stream.done);
  EXPECT_EQ(stream.text, "");
  for (const Json& chunk : stream.chunks) EXPECT_EQ(chunk["modality"], "audio") << chunk.dump();
  EXPECT_EQ(stream.audio_pieces.size(), 3u);
  EXPECT_EQ(stream.finishes, (std::vector<std::pair<std::string, std::string>>{{"audio", "stop"}}));
}

TEST_F(ChatAudioTest, ABadAudioObjectIsRefusedNamingTheField) {
  start();
  struct Case {
    Json audio;
    std::string param;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{"format", "aiff"}},
       "audio.format",
       "'audio.format' must be one of wav, mp3, flac, opus, aac, pcm16, pcm, got 'aiff'"},
      {{{"voice", 7}}, "audio.voice", "'audio.voice' must be a string, got 7"},
      {{{"voice", ""}}, "audio.voice", "'audio.voice' is empty"},
      {"wav", "audio", "'audio' must be an object, got \"wav\""},
  };
  for (const Case& c : cases) {
    CurlReply reply = post("/v1/chat/completions", chat_request({"text", "audio"}, 2, {{"audio", c.audio}}));
    EXPECT_EQ(reply.status, 400) << reply.body;
    EXPECT_EQ(reply.json()["error"]["param"], c.param) << reply.body;
    EXPECT_EQ(reply.json()["error"]["message"], c.message) << reply.body;
  }
  EXPECT_TRUE(backend_->submitted().empty());
}

TEST_F(ChatAudioTest, AudioFromAPipelineWithoutAnAudioStageIsRefused) {
  start({}, [](server::ApiServerOptions& o) {
    o.pipeline = "qwen3";
    o.output_modalities = {"text"};
  });
  CurlReply reply = post("/v1/chat/completions", chat_request({"text", "audio"}, 2, {{"audio", {{"voice", "x"}}}}));
  EXPECT_EQ(reply.status, 400) << reply.body;
  EXPECT_EQ(reply.json()["error"]["param"], "modalities");
  EXPECT_TRUE(backend_->submitted().empty());
}

}  // namespace
}  // namespace omni::testing
