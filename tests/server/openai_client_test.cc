// The official OpenAI client (npm openai@6, run with node) against the real server.
#include <gtest/gtest.h>

#include <filesystem>

#include "base/base64.h"
#include "media/audio_decoder.h"
#include "server/test_server.h"
#include "support/subprocess.h"

namespace omni::testing {
namespace {

using namespace std::chrono_literals;

class OpenAiClientTest : public ServerTest {};

std::string node_binary() {
  for (const char* candidate : {"/usr/bin/node", "/usr/local/bin/node"}) {
    if (std::filesystem::exists(candidate)) return candidate;
  }
  return "";
}

TEST_F(OpenAiClientTest, ModelsCompletionsChatStreamingUsageConcurrencyAndErrors) {
  std::string node = node_binary();
  std::string modules = std::string(OMNI_SOURCE_DIR) + "/third_party/npm/node_modules";
  ASSERT_FALSE(node.empty()) << "node is not installed (scripts/install-deps installs it)";
  ASSERT_TRUE(std::filesystem::exists(modules + "/openai/package.json"))
      << "openai@6 is missing from " << modules << "; run scripts/install-deps";
  // A slow first token keeps the 64 streams in flight at the same time.
  start({.first_token_delay = 400ms, .token_delay = 1ms},
        [](server::ApiServerOptions& o) { o.api_keys = {"test-key"}; });

  ProcessResult result = run_process(
      {node, std::string(OMNI_SOURCE_DIR) + "/tests/server/openai_client.cjs", url("/v1"), "test-key", kModelName},
      {"NODE_PATH=" + modules});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  Json out = Json::parse(result.out);

  EXPECT_EQ(out["models"], Json({kModelName}));

  EXPECT_EQ(out["completion"]["object"], "text_completion");
  EXPECT_EQ(out["completion"]["text"], "abcd");
  EXPECT_EQ(out["completion"]["finish_reason"], "length");
  EXPECT_EQ(out["completion"]["usage"], Json({{"prompt_tokens", 3}, {"completion_tokens", 4}, {"total_tokens", 7}}));

  EXPECT_EQ(out["completion_stream"]["text"], "abcde");
  EXPECT_EQ(out["completion_stream"]["chunks"], 6);  // five tokens and the usage chunk
  // "hello" and the byte tokenizer's BOS.
  EXPECT_EQ(out["completion_stream"]["usage"],
            Json({{"prompt_tokens", 6}, {"completion_tokens", 5}, {"total_tokens", 11}}));

  int64_t chat_prompt = ByteRenderer::chat_text({{"messages", {{{"role", "user"}, {"content", "hi there"}}}}}).size();
  EXPECT_EQ(out["chat"]["object"], "chat.completion");
  EXPECT_EQ(out["chat"]["message"]["role"], "assistant");
  EXPECT_EQ(out["chat"]["message"]["content"], "abc");
  EXPECT_EQ(out["chat"]["finish_reason"], "length");
  EXPECT_EQ(out["chat"]["usage"]["prompt_tokens"], chat_prompt);

  EXPECT_EQ(out["chat_stream"]["role"], "assistant");
  EXPECT_EQ(out["chat_stream"]["content"], "abcdef");
  EXPECT_EQ(out["chat_stream"]["finish_reason"], "length");
  EXPECT_EQ(out["chat_stream"]["usage"]["completion_tokens"], 6);

  ASSERT_EQ(out["concurrent"].size(), 64u);
  for (const Json& text : out["concurrent"]) EXPECT_EQ(text, "abcdefghij");
  EXPECT_EQ(backend_->peak_live_requests(), 64);

  EXPECT_EQ(out["unknown_model"]["status"], 404);
  EXPECT_EQ(out["bad_temperature"]["status"], 400);
  EXPECT_EQ(out["bad_temperature"]["param"], "temperature");
  EXPECT_EQ(out["wrong_key"]["status"], 401);
  EXPECT_EQ(out["wrong_key"]["name"], "AuthenticationError");

  // ignore_eos reached the backend through the client's extra body fields.
  bool saw_ignore_eos = false;
  for (const auto& request : backend_->submitted()) {
    saw_ignore_eos |= request.sampling_params.value("ignore_eos", false);
  }
  EXPECT_TRUE(saw_ignore_eos);
}

// Text and audio in one chat completion, as the OpenAI client reads it.
TEST_F(OpenAiClientTest, ChatWithAudioOutputNonStreamedAndStreamed) {
  std::string node = node_binary();
  std::string modules = std::string(OMNI_SOURCE_DIR) + "/third_party/npm/node_modules";
  ASSERT_FALSE(node.empty()) << "node is not installed (scripts/install-deps installs it)";
  start();
  ProcessResult result = run_process(
      {node, std::string(OMNI_SOURCE_DIR) + "/tests/server/openai_chat_audio.cjs", url("/v1"), "key", kModelName},
      {"NODE_PATH=" + modules});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  Json out = Json::parse(result.out);

  const Json& choices = out["whole"]["choices"];
  ASSERT_EQ(choices.size(), 2u) << out.dump();
  EXPECT_EQ(choices[0]["message"]["content"], "abcd");
  EXPECT_TRUE(choices[1]["message"]["content"].is_null());
  const std::string file = base64_decode(choices[1]["message"]["audio"]["data"].get<std::string>());
  media::DecodedAudio decoded = media::decode_audio(file);
  EXPECT_EQ(decoded.container, "wav");
  EXPECT_EQ(decoded.sample_rate, kScriptedAudioSampleRate);
  std::vector<float> sent = ScriptedBackend::audio_samples(3 * 480);
  ASSERT_EQ(decoded.samples.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    // 16-bit samples, read back at 1/32768 a step.
    EXPECT_NEAR(decoded.samples[i], sent[i], 1.0 / 16384) << i;
  }
  EXPECT_EQ(out["whole"]["usage"]["completion_tokens"], 4);

  const Json& streamed = out["streamed"];
  EXPECT_EQ(streamed["text"], "abcd");
  ASSERT_EQ(streamed["audio"].size(), 3u);
  std::vector<float> joined;
  for (const Json& piece : streamed["audio"]) {
    media::DecodedAudio part = media::decode_audio(base64_decode(piece.get<std::string>()));
    joined.insert(joined.end(), part.samples.begin(), part.samples.end());
  }
  EXPECT_EQ(joined, decoded.samples) << "the streamed pieces hold the non-streamed samples";
  EXPECT_EQ(streamed["finishes"], Json::array({Json::array({"text", "length"})}));
  EXPECT_EQ(streamed["usage"]["completion_tokens"], 4);
  EXPECT_EQ(streamed["modalities"][0], "text");

  EXPECT_EQ(out["bad_format"], Json({{"status", 400}, {"param", "audio.format"}}));
  EXPECT_EQ(backend_->submitted().front().additional_information, Json({{"voice", "Ethan"}}));
}

}  // namespace
}  // namespace omni::testing
