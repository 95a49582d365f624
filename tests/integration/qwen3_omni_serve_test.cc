// `omnistage serve` of the random-weight Qwen3-Omni demo checkpoint (`demo-model --arch
// qwen3_omni`, the Instruct layout with enable_audio_output) with the bundled deploy YAML: the
// thinker serves text chats alone (the talker and code2wav have no stage model yet, which the log
// says), `modalities: ["audio"]` is a 400 naming the field, and list content reaches the
// content-part template of Qwen3-Omni.
#include <gtest/gtest.h>

#include <string>

#include "base/json.h"
#include "integration/serve_process.h"

namespace omni::testing {
namespace {

inline constexpr char kQwen3OmniArch[] = "qwen3_omni";

class Qwen3OmniServeTest : public DemoServerSuite<kQwen3OmniArch> {
 protected:
  static Json chat(const Json& content, int max_tokens = 4) {
    return {{"model", kModelName},
            {"messages", {{{"role", "user"}, {"content", content}}}},
            {"max_tokens", max_tokens},
            {"temperature", 0},
            {"ignore_eos", true}};
  }
};

TEST_F(Qwen3OmniServeTest, TheThinkerServesAloneAndTheLogSaysWhy) {
  const std::string log = read_file(dir_->path() / "serve.log");
  EXPECT_NE(log.find("stage(s) 1 ('talker', stage model 'qwen3_omni_talker'), 2 ('code2wav', stage model "
                     "'qwen3_omni_code2wav') of pipeline qwen3_omni_moe have no stage model in omnistage yet; serving "
                     "its first 1 stage(s) alone, which produce text"),
            std::string::npos)
      << log;
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

TEST_F(Qwen3OmniServeTest, AudioOutputAndMediaInputAreRefusedNamingTheField) {
  Json audio = chat("Say hi");
  audio["modalities"] = {"audio"};
  HttpResult r = curl(*server_, "/v1/chat/completions", audio.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(Json::parse(r.body)["error"]["param"], "modalities") << r.body;
  EXPECT_NE(r.body.find("'modalities' asks for audio, but pipeline 'qwen3_omni_moe' is served without the stages that "
                        "produce it (omnistage has no stage model for them yet): it produces text"),
            std::string::npos)
      << r.body;

  Json text = chat("Say hi");
  text["modalities"] = {"text"};
  EXPECT_EQ(curl(*server_, "/v1/chat/completions", text.dump()).status, 200);

  HttpResult sound =
      curl(*server_, "/v1/chat/completions",
           chat(Json::array({{{"type", "input_audio"}, {"input_audio", {{"data", "UklGRg=="}, {"format", "wav"}}}},
                             {{"type", "text"}, {"text", "What is this?"}}}))
               .dump());
  EXPECT_EQ(sound.status, 400) << sound.body;
  EXPECT_EQ(Json::parse(sound.body)["error"]["param"], "messages[0].content[0]") << sound.body;
  EXPECT_EQ(curl(*server_, "/health", std::nullopt).status, 200);
}

}  // namespace
}  // namespace omni::testing
