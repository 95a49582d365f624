// `omnistage serve` end to end: the real binary on a random-weight demo checkpoint (Qwen3's real
// tokenizer and chat template), driven with curl and with the official OpenAI client.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/json.h"
#include "integration/serve_process.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"
#include "tensor/npy.h"

namespace omni::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

double metric(const std::string& metrics_text, const std::string& name) {
  std::istringstream lines(metrics_text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with(name) ||
        (line.size() > name.size() && line[name.size()] != '{' && line[name.size()] != ' ')) {
      continue;
    }
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

inline constexpr char kQwen3Arch[] = "qwen3";

class ServeTest : public DemoServerSuite<kQwen3Arch> {
 protected:
  static Json completion_body(const Json& prompt, int max_tokens, bool stream = false) {
    return {{"model", kModelName}, {"prompt", prompt},   {"max_tokens", max_tokens},
            {"temperature", 0},    {"ignore_eos", true}, {"stream", stream}};
  }
};

TEST_F(ServeTest, CurlModelsCompletionsAndChatWithUsage) {
  HttpResult models = curl(*server_, "/v1/models", std::nullopt);
  ASSERT_EQ(models.status, 200) << models.body;
  EXPECT_EQ(Json::parse(models.body)["data"][0]["id"], kModelName);

  HttpResult completion = curl(*server_, "/v1/completions", completion_body("Hello", 5).dump());
  ASSERT_EQ(completion.status, 200) << completion.body;
  Json c = Json::parse(completion.body);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c["usage"]["completion_tokens"], 5);
  EXPECT_EQ(c["usage"]["prompt_tokens"], 1);  // "Hello" is one Qwen3 token
  EXPECT_EQ(c["usage"]["total_tokens"], 6);

  Json stream_body = completion_body("Hello", 5, true);
  stream_body["stream_options"] = {{"include_usage", true}};
  HttpResult streamed = curl(*server_, "/v1/completions", stream_body.dump());
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  std::string text;
  Json usage;
  for (const Json& event : sse_events(streamed.body)) {
    if (!event["choices"].empty()) text += event["choices"][0]["text"].get<std::string>();
    if (event.contains("usage") && !event["usage"].is_null()) usage = event["usage"];
  }
  EXPECT_EQ(text, c["choices"][0]["text"]) << "greedy streamed text equals the non-streamed one";
  EXPECT_EQ(usage["completion_tokens"], 5);

  Json chat_body = {{"model", kModelName},
                    {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                    {"max_tokens", 4},
                    {"temperature", 0},
                    {"ignore_eos", true}};
  HttpResult chat = curl(*server_, "/v1/chat/completions", chat_body.dump());
  ASSERT_EQ(chat.status, 200) << chat.body;
  Json ch = Json::parse(chat.body);
  EXPECT_EQ(ch["object"], "chat.completion");
  EXPECT_EQ(ch["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(ch["usage"]["completion_tokens"], 4);
  // Qwen3's template wraps the message in <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n.
  EXPECT_GT(ch["usage"]["prompt_tokens"].get<int>(), 5);
}

TEST_F(ServeTest, ConcurrentGreedyStreamsEqualSequentialOnes) {
  constexpr int kPrompts = 4;
  constexpr int kStreams = 64;
  std::vector<std::string> sequential;
  for (int i = 0; i < kPrompts; ++i) {
    HttpResult r = curl(*server_, "/v1/completions", completion_body("Request " + std::to_string(i), 6).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    sequential.push_back(Json::parse(r.body)["choices"][0]["text"]);
  }
  std::vector<std::string> streamed(kStreams);
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      HttpResult r =
          curl(*server_, "/v1/completions", completion_body("Request " + std::to_string(i % kPrompts), 6, true).dump());
      for (const Json& event : sse_events(r.body)) {
        if (!event["choices"].empty()) streamed[i] += event["choices"][0]["text"].get<std::string>();
      }
    });
  }
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < kStreams; ++i) EXPECT_EQ(streamed[i], sequential[i % kPrompts]) << "stream " << i;
}

TEST_F(ServeTest, OfficialOpenAiClient) {
  const std::string modules = std::string(OMNI_SOURCE_DIR) + "/third_party/npm/node_modules";
  ASSERT_TRUE(fs::exists(modules + "/openai/package.json")) << "run scripts/install-deps";
  ProcessResult result =
      run_process({"/usr/bin/node", std::string(OMNI_SOURCE_DIR) + "/tests/integration/serve_client.cjs",
                   server_->url("/v1"), kApiKey, kModelName},
                  {"NODE_PATH=" + modules});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  Json out = Json::parse(result.out);
  EXPECT_EQ(out["models"], Json({kModelName}));
  EXPECT_EQ(out["completion"]["usage"]["completion_tokens"], 3);
  EXPECT_EQ(out["completion"]["finish_reason"], "length");
  EXPECT_EQ(out["chat_stream"]["role"], "assistant");
  EXPECT_EQ(out["chat_stream"]["finish_reason"], "length");
  EXPECT_EQ(out["chat_stream"]["usage"]["completion_tokens"], 4);
  EXPECT_EQ(out["chat_stream"]["content"], out["chat"]["content"]) << "greedy: streamed equals non-streamed";
  EXPECT_EQ(out["unknown_model"]["status"], 404);
  EXPECT_EQ(out["bad_temperature"]["status"], 400);
  EXPECT_EQ(out["bad_temperature"]["param"], "temperature");
  EXPECT_EQ(out["wrong_key"]["status"], 401);
}

// What many OpenAI clients send: content as a list of parts. Qwen3's template prints the content as
// a string, so the text parts are joined (with newlines) before it sees them; a media part is a 400
// naming the part, and the server answers the next request.
TEST_F(ServeTest, ListContentIsJoinedForTheQwen3TemplateAndMediaPartsAreRefused) {
  auto chat = [](const Json& content) {
    return Json{{"model", kModelName},
                {"messages", {{{"role", "user"}, {"content", content}}}},
                {"max_tokens", 3},
                {"temperature", 0},
                {"ignore_eos", true}};
  };
  HttpResult parts =
      curl(*server_, "/v1/chat/completions", chat(Json::array({{{"type", "text"}, {"text", "hi"}}})).dump());
  ASSERT_EQ(parts.status, 200) << parts.body;
  HttpResult plain = curl(*server_, "/v1/chat/completions", chat("hi").dump());
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(Json::parse(parts.body)["usage"], Json::parse(plain.body)["usage"]);
  EXPECT_EQ(Json::parse(parts.body)["choices"][0]["message"]["content"],
            Json::parse(plain.body)["choices"][0]["message"]["content"]);

  HttpResult two =
      curl(*server_, "/v1/chat/completions",
           chat(Json::array({{{"type", "text"}, {"text", "hi"}}, {{"type", "text"}, {"text", "you"}}})).dump());
  HttpResult joined = curl(*server_, "/v1/chat/completions", chat("hi\nyou").dump());
  ASSERT_EQ(two.status, 200) << two.body;
  EXPECT_EQ(Json::parse(two.body)["usage"], Json::parse(joined.body)["usage"]);

  HttpResult image =
      curl(*server_, "/v1/chat/completions",
           chat(Json::array({{{"type", "text"}, {"text", "look"}},
                             {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,iVBORw0KGgo="}}}}}))
               .dump());
  EXPECT_EQ(image.status, 400) << image.body;
  EXPECT_EQ(Json::parse(image.body)["error"]["param"], "messages[0].content[1]") << image.body;
  EXPECT_EQ(curl(*server_, "/v1/chat/completions", chat("hi").dump()).status, 200);
}

TEST_F(ServeTest, ErrorStatusesLeaveTheServerHealthy) {
  Json bad_field = completion_body("Hi", 2);
  bad_field["top_p"] = 7;
  HttpResult r = curl(*server_, "/v1/completions", bad_field.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(Json::parse(r.body)["error"]["param"], "top_p");

  r = curl(*server_, "/v1/completions", completion_body(Json::array({1, 151936 + 10}), 2).dump());
  EXPECT_EQ(r.status, 400) << r.body;

  r = curl(*server_, "/v1/completions", "{not json");
  EXPECT_EQ(r.status, 400) << r.body;

  Json unknown = completion_body("Hi", 2);
  unknown["model"] = "no-such-model";
  r = curl(*server_, "/v1/completions", unknown.dump());
  EXPECT_EQ(r.status, 404) << r.body;

  ProcessResult no_key =
      run_process({"/usr/bin/curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", server_->url("/v1/models")});
  EXPECT_EQ(no_key.out, "401");

  // The size limits, timeouts and caps: serve_limits_test.cc.
  EXPECT_EQ(curl(*server_, "/health", std::nullopt).status, 200);
  EXPECT_EQ(curl(*server_, "/v1/completions", completion_body("Hi", 2).dump()).status, 200);
}

// log_softmax of one row of logits, in double precision.
std::vector<double> log_softmax(const float* row, int64_t size) {
  double max = *std::max_element(row, row + size);
  double sum = 0;
  for (int64_t i = 0; i < size; ++i) sum += std::exp(row[i] - max);
  std::vector<double> out(size);
  for (int64_t i = 0; i < size; ++i) out[i] = row[i] - max - std::log(sum);
  return out;
}

// Token ids sorted by descending logprob (ties: lower id first), the first `k`.
std::vector<int32_t> top_ids(const std::vector<double>& logprobs, size_t k) {
  std::vector<int32_t> ids(logprobs.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), [&](int32_t a, int32_t b) {
    return logprobs[a] > logprobs[b] || (logprobs[a] == logprobs[b] && a < b);
  });
  ids.resize(k);
  return ids;
}

TEST_F(ServeTest, LogprobsAreTheModelsLogSoftmax) {
  const std::vector<int32_t> prompt = {9707, 11, 1879, 0};
  Json body = completion_body(prompt, 2);
  body["logprobs"] = 3;
  body["return_tokens_as_token_ids"] = true;
  HttpResult r = curl(*server_, "/v1/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json logprobs = Json::parse(r.body)["choices"][0]["logprobs"];
  ASSERT_EQ(logprobs["tokens"].size(), 2u) << logprobs.dump();
  std::vector<int32_t> generated;
  for (const Json& token : logprobs["tokens"]) {
    std::string name = token.get<std::string>();
    ASSERT_TRUE(name.starts_with("token_id:")) << name;
    generated.push_back(std::stoi(name.substr(9)));
  }
  EXPECT_EQ(logprobs["text_offset"], Json({0, logprobs["tokens"][0].get<std::string>().size()}));

  // The model's own logits for the two positions that chose these tokens: the prompt's last and
  // the first generated token's.
  std::vector<int32_t> extended = prompt;
  extended.push_back(generated[0]);
  std::string ids;
  for (int32_t id : extended) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  const fs::path npy = dir_->path() / "logits.npy";
  ProcessResult dumped = run_process({OMNISTAGE_BINARY, "generate", "--model", (dir_->path() / "model").string(),
                                      "--prompt-token-ids", ids, "--max-tokens", "1", "--dump-logits", npy.string()});
  ASSERT_EQ(dumped.exit_code, 0) << dumped.err;
  tensor::Tensor logits = tensor::load_npy(npy);
  const int64_t vocab = logits.shape()[1];
  for (size_t step = 0; step < 2; ++step) {
    const int64_t row = static_cast<int64_t>(prompt.size()) - 1 + static_cast<int64_t>(step);
    std::vector<double> expected = log_softmax(logits.data<float>() + row * vocab, vocab);
    std::vector<int32_t> best = top_ids(expected, 3);
    EXPECT_EQ(generated[step], best[0]) << "greedy picks the most likely token at step " << step;
    EXPECT_NEAR(logprobs["token_logprobs"][step].get<double>(), expected[best[0]], 2e-3) << "step " << step;
    const Json& top = logprobs["top_logprobs"][step];
    EXPECT_EQ(top.size(), 3u) << top.dump();  // the sampled token is one of the top 3
    for (int32_t id : best) {
      std::string key = "token_id:" + std::to_string(id);
      ASSERT_TRUE(top.contains(key)) << key << " missing from " << top.dump();
      EXPECT_NEAR(top[key].get<double>(), expected[id], 2e-3) << key;
    }
  }
}

TEST_F(ServeTest, ChatLogprobsStreamedAndNot) {
  Json body = {{"model", kModelName}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
               {"max_tokens", 3},     {"temperature", 0},
               {"ignore_eos", true},  {"logprobs", true},
               {"top_logprobs", 2}};
  HttpResult whole = curl(*server_, "/v1/chat/completions", body.dump());
  ASSERT_EQ(whole.status, 200) << whole.body;
  const Json content = Json::parse(whole.body)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u) << whole.body;
  for (const Json& entry : content) {
    const std::string token = entry["token"];
    Json bytes = Json::array();
    for (unsigned char c : token) bytes.push_back(static_cast<int>(c));
    EXPECT_EQ(entry["bytes"], bytes);
    ASSERT_EQ(entry["top_logprobs"].size(), 2u);
    // Greedy: the chosen token is the most likely one, with the same logprob.
    EXPECT_EQ(entry["top_logprobs"][0]["token"], token);
    EXPECT_EQ(entry["top_logprobs"][0]["logprob"], entry["logprob"]);
    EXPECT_GE(entry["logprob"].get<double>(), entry["top_logprobs"][1]["logprob"].get<double>());
    EXPECT_LE(entry["logprob"].get<double>(), 0.0);
  }

  body["stream"] = true;
  HttpResult streamed = curl(*server_, "/v1/chat/completions", body.dump());
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  Json streamed_content = Json::array();
  for (const Json& event : sse_events(streamed.body)) {
    if (event["choices"].empty() || event["choices"][0]["logprobs"].is_null()) continue;
    for (const Json& entry : event["choices"][0]["logprobs"]["content"]) streamed_content.push_back(entry);
  }
  EXPECT_EQ(streamed_content, content);
}

TEST_F(ServeTest, SeveralChoicesAreDistinctAndReproducibleWithASeed) {
  Json body = {{"model", kModelName}, {"prompt", "Hello"}, {"max_tokens", 4},   {"n", 3},
               {"temperature", 1.0},  {"seed", 7},         {"ignore_eos", true}};
  HttpResult first = curl(*server_, "/v1/completions", body.dump());
  ASSERT_EQ(first.status, 200) << first.body;
  Json a = Json::parse(first.body);
  ASSERT_EQ(a["choices"].size(), 3u) << first.body;
  std::set<std::string> texts;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a["choices"][i]["index"], i);
    EXPECT_EQ(a["choices"][i]["finish_reason"], "length");
    texts.insert(a["choices"][i]["text"].get<std::string>());
  }
  EXPECT_EQ(texts.size(), 3u) << "each choice samples with its own seed: " << first.body;
  EXPECT_EQ(a["usage"]["prompt_tokens"], 1);
  EXPECT_EQ(a["usage"]["completion_tokens"], 3 * 4);

  HttpResult again = curl(*server_, "/v1/completions", body.dump());
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(Json::parse(again.body)["choices"], a["choices"]);

  // Streamed: each choice's chunks carry its index and end with its own finish reason.
  body["stream"] = true;
  HttpResult streamed = curl(*server_, "/v1/completions", body.dump());
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  std::vector<std::string> streamed_texts(3);
  std::vector<Json> finish(3);
  for (const Json& event : sse_events(streamed.body)) {
    for (const Json& choice : event["choices"]) {
      int index = choice["index"];
      ASSERT_TRUE(index >= 0 && index < 3) << event.dump();
      streamed_texts[index] += choice["text"].get<std::string>();
      if (!choice["finish_reason"].is_null()) finish[index] = choice["finish_reason"];
    }
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(streamed_texts[i], a["choices"][i]["text"]) << "choice " << i;
    EXPECT_EQ(finish[i], "length") << "choice " << i;
  }

  Json chat = {{"model", kModelName}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
               {"max_tokens", 3},     {"n", 2},
               {"temperature", 1.0},  {"seed", 3},
               {"ignore_eos", true}};
  HttpResult chat_reply = curl(*server_, "/v1/chat/completions", chat.dump());
  ASSERT_EQ(chat_reply.status, 200) << chat_reply.body;
  Json c = Json::parse(chat_reply.body);
  ASSERT_EQ(c["choices"].size(), 2u);
  EXPECT_NE(c["choices"][0]["message"]["content"], c["choices"][1]["message"]["content"]);
  EXPECT_EQ(c["usage"]["completion_tokens"], 2 * 3);
}

TEST_F(ServeTest, ClientDisconnectMidStreamFreesTheEngineSlot) {
  // A stream far longer than curl's patience: curl hangs up after 1.5 s.
  HttpResult cut =
      curl(*server_, "/v1/completions", completion_body("Tell me", 8000, true).dump(), {"--max-time", "1.5"});
  EXPECT_FALSE(sse_events(cut.body.substr(0, cut.body.rfind("data: "))).empty()) << "tokens arrived before the cut";
  bool freed = false;
  for (auto deadline = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < deadline;) {
    HttpResult metrics = curl(*server_, "/metrics", std::nullopt);
    if (metric(metrics.body, "vllm:num_requests_running") == 0) {
      freed = true;
      break;
    }
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(freed) << "vllm:num_requests_running did not return to 0";
}

// Last in the suite: it ends the shared server.
TEST_F(ServeTest, SigtermShutsDownWithoutChildrenOrSharedMemory) {
  const std::vector<pid_t> stages = children_of(server_->pid());
  ASSERT_FALSE(stages.empty()) << "serve runs its stage in a child process";
  ASSERT_FALSE(server_->session().empty()) << server_->log();
  std::optional<int> status = server_->terminate(15s);
  ASSERT_TRUE(status.has_value()) << "serve did not exit within 15 s of SIGTERM";
  EXPECT_EQ(*status, 0) << server_->log();
  for (pid_t stage : stages) EXPECT_FALSE(process_exists(stage)) << "stage process " << stage << " outlived serve";
  EXPECT_TRUE(shm_entries("omnistage_" + server_->session()).empty());
}

TEST(ServeStageFailure, KilledStageFailsTheRequestNamingTheStageAndHealthTurns503) {
  TempDir dir;
  ASSERT_EQ(run_process({OMNISTAGE_BINARY, "demo-model", "--out", (dir.path() / "model").string()}).exit_code, 0);
  ServeProcess server(dir.path() / "model", dir.path() / "serve.log");
  ASSERT_GT(server.port(), 0);
  const std::vector<pid_t> stages = children_of(server.pid());
  ASSERT_EQ(stages.size(), 1u);

  HttpResult result;
  std::thread client([&] {
    Json body = {{"model", kModelName}, {"prompt", "Hi"}, {"max_tokens", 8000}, {"ignore_eos", true}, {"stream", true}};
    result = curl(server, "/v1/completions", body.dump(), {"--max-time", "30"});
  });
  std::this_thread::sleep_for(1s);  // the request is generating
  kill(stages[0], SIGKILL);
  client.join();
  EXPECT_EQ(result.status, 200) << "the stream had started";
  EXPECT_NE(result.body.find("stage 0"), std::string::npos)
      << result.body.substr(result.body.size() > 600 ? result.body.size() - 600 : 0);
  EXPECT_EQ(curl(server, "/health", std::nullopt).status, 503);
  EXPECT_NE(server.log().find("stage 0"), std::string::npos) << "the failure is logged";
  ASSERT_TRUE(server.terminate(15s).has_value()) << "serve exits after a stage failure";
}

// tensor_parallel_size on a stage: the stage process is rank 0 and starts one rank process; the
// greedy text equals one rank's; killing the rank fails the stage cleanly (named in the error, no
// process or shared memory left).
TEST(ServeTensorParallel, StageOverTwoRanksServesOneRanksTextAndFailsWhenARankDies) {
  TempDir dir;
  ASSERT_EQ(run_process({OMNISTAGE_BINARY, "demo-model", "--out", (dir.path() / "model").string()}).exit_code, 0);
  const Json body = {
      {"model", kModelName}, {"prompt", "Hello there"}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
  std::string one_rank;
  {
    ServeProcess server(dir.path() / "model", dir.path() / "serve1.log");
    ASSERT_GT(server.port(), 0);
    HttpResult r = curl(server, "/v1/completions", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    one_rank = Json::parse(r.body)["choices"][0]["text"];
  }
  ServeProcess server(dir.path() / "model", dir.path() / "serve2.log",
                      {"--stage-overrides", R"({"0": {"tensor_parallel_size": 2, "devices": "0,1"}})"});
  ASSERT_GT(server.port(), 0);
  const std::vector<pid_t> stages = children_of(server.pid());
  ASSERT_EQ(stages.size(), 1u);
  const std::vector<pid_t> ranks = children_of(stages[0]);
  ASSERT_EQ(ranks.size(), 1u) << "the stage process starts rank 1";
  HttpResult r = curl(server, "/v1/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["choices"][0]["text"], one_rank);

  kill(ranks[0], SIGKILL);
  r = curl(server, "/v1/completions", body.dump());
  EXPECT_NE(r.status, 200) << r.body;
  EXPECT_NE(server.log().find("tensor-parallel rank 1 (pid " + std::to_string(ranks[0]) + ") was killed by signal 9"),
            std::string::npos)
      << server.log();
  EXPECT_EQ(curl(server, "/health", std::nullopt).status, 503);
  ASSERT_TRUE(server.terminate(15s).has_value());
  EXPECT_FALSE(process_exists(stages[0]));
  EXPECT_EQ(shm_entries("omnistage_tp_" + std::to_string(stages[0])), std::vector<std::string>{});
}

}  // namespace
}  // namespace omni::testing
