// The official OpenAI client (npm openai@6, run with node) against the real server.
#include <gtest/gtest.h>

#include <filesystem>

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

}  // namespace
}  // namespace omni::testing
