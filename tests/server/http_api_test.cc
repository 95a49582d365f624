// The OpenAI-compatible HTTP API driven with curl: routes, response shapes, SSE framing, usage,
// errors, keep-alive, disconnects and metrics.
#include <gtest/gtest.h>

#include <thread>

#include "server/test_server.h"

namespace omni::testing {
namespace {

using namespace std::chrono_literals;

class HttpApiTest : public ServerTest {};

TEST_F(HttpApiTest, HealthVersionAndModels) {
  start();
  CurlReply health = get("/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.json(), Json({{"status", "healthy"}}));

  backend_->set_healthy(false);
  EXPECT_EQ(get("/health").status, 503);
  backend_->set_healthy(true);

  EXPECT_EQ(get("/version").json(), Json({{"version", "0.1.0-test"}}));

  Json models = get("/v1/models").json();
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], kModelName);
  EXPECT_EQ(models["data"][0]["object"], "model");
  EXPECT_EQ(models["data"][0]["root"], "/models/test");
  EXPECT_EQ(models["data"][0]["max_model_len"], 4096);
}

// The card's "omnistage" object: the pipeline, its outputs, the speech task and every route; GET /
// is the playground page (without the key) unless the option turns it off.
TEST_F(HttpApiTest, ModelCardsListTheEndpointsAndRootServesThePlayground) {
  start({}, [](server::ApiServerOptions& o) {
    o.api_keys = {"sekrit"};
    o.pipeline = "qwen3_tts";
    o.output_modalities = {"audio"};
    o.speech.task_type = "CustomVoice";
  });
  Json served = get("/v1/models", {"-H", "Authorization: Bearer sekrit"}).json()["data"][0]["omnistage"];
  EXPECT_EQ(served["pipeline"], "qwen3_tts");
  EXPECT_EQ(served["output_modalities"], Json({"audio"}));
  EXPECT_EQ(served["speech_task_type"], "CustomVoice");
  EXPECT_EQ(
      served["endpoints"],
      Json({"GET /", "POST /detokenize", "GET /health", "GET /metrics", "GET /playground", "POST /tokenize",
            "POST /v1/audio/speech", "POST /v1/audio/speech/batch", "WS /v1/audio/speech/stream",
            "GET /v1/audio/voices", "POST /v1/chat/completions", "POST /v1/completions", "POST /v1/images/generations",
            "GET /v1/models", "POST /v1/omni/sleep", "POST /v1/omni/wakeup", "GET /version"}));
  CurlReply page = get("/");
  EXPECT_EQ(page.status, 200);
  EXPECT_TRUE(page.has_header("Content-Type: text/html; charset=utf-8")) << page.headers;
  EXPECT_EQ(page.body.rfind("<!doctype html>", 0), 0u);
  EXPECT_EQ(get("/playground").body, page.body);
  EXPECT_EQ(post("/", Json::object()).status, 405);
  TearDown();

  start({}, [](server::ApiServerOptions& o) { o.playground = false; });
  EXPECT_EQ(get("/").status, 404);
  EXPECT_EQ(get("/playground").status, 404);
  served = get("/v1/models").json()["data"][0]["omnistage"];
  EXPECT_TRUE(served["speech_task_type"].is_null());
  EXPECT_EQ(served["endpoints"][0], "POST /detokenize");
}

TEST_F(HttpApiTest, ServedModelNameDefaultsToTheModelPathAndListsEveryName) {
  start({}, [](server::ApiServerOptions& o) { o.served_model_names.clear(); });
  EXPECT_EQ(get("/v1/models").json()["data"][0]["id"], "/models/test");
  TearDown();
  start({}, [](server::ApiServerOptions& o) { o.served_model_names = {"alpha", "beta"}; });
  Json data = get("/v1/models").json()["data"];
  ASSERT_EQ(data.size(), 2u);
  EXPECT_EQ(data[1]["id"], "beta");
  Json reply = post("/v1/completions", {{"model", "beta"}, {"prompt", {1, 2}}, {"max_tokens", 2}}).json();
  EXPECT_EQ(reply["model"], "beta");
}

TEST_F(HttpApiTest, CompletionWithTokenIds) {
  start();
  CurlReply reply = post("/v1/completions", {{"model", kModelName}, {"prompt", {5, 6, 7}}, {"max_tokens", 5}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  Json json = reply.json();
  EXPECT_EQ(json["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(json["object"], "text_completion");
  EXPECT_EQ(json["model"], kModelName);
  EXPECT_TRUE(json["created"].is_number_integer());
  ASSERT_EQ(json["choices"].size(), 1u);
  EXPECT_EQ(json["choices"][0],
            Json({{"index", 0}, {"text", "abcde"}, {"logprobs", nullptr}, {"finish_reason", "length"}}));
  EXPECT_EQ(json["usage"], Json({{"prompt_tokens", 3}, {"completion_tokens", 5}, {"total_tokens", 8}}));

  auto submitted = backend_->submitted();
  ASSERT_EQ(submitted.size(), 1u);
  EXPECT_EQ(submitted[0].prompt_token_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(submitted[0].request_id, json["id"]);
}

TEST_F(HttpApiTest, CompletionWithTextPromptsEchoAndSeveralPrompts) {
  start();
  Json reply = post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 3}, {"echo", true}}).json();
  EXPECT_EQ(reply["choices"][0]["text"], "hiabc");
  // The byte tokenizer adds BOS for a plain prompt: 1 + 2 bytes.
  EXPECT_EQ(reply["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(backend_->submitted().back().prompt_token_ids, (std::vector<int32_t>{ByteRenderer::kBos, 'h', 'i'}));

  reply = post("/v1/completions", {{"prompt", {{1, 2}, {3}}}, {"max_tokens", 2}, {"n", 2}}).json();
  ASSERT_EQ(reply["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(reply["choices"][i]["index"], i);
    EXPECT_EQ(reply["choices"][i]["text"], "ab");
  }
  EXPECT_EQ(reply["usage"], Json({{"prompt_tokens", 3}, {"completion_tokens", 8}, {"total_tokens", 11}}));
}

TEST_F(HttpApiTest, CompletionStreamIsFramedAsSseWithUsageLast) {
  start();
  CurlReply reply =
      post("/v1/completions",
           {{"prompt", {1, 2}}, {"max_tokens", 4}, {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(reply.status, 200);
  EXPECT_TRUE(reply.has_header("Content-Type: text/event-stream"));
  EXPECT_TRUE(reply.has_header("Transfer-Encoding: chunked"));
  std::vector<std::string> payloads = sse_payloads(reply.body);
  ASSERT_EQ(payloads.size(), 6u) << reply.body;  // 4 tokens, usage, [DONE]
  EXPECT_EQ(payloads.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i < 4; ++i) {
    Json chunk = Json::parse(payloads[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_TRUE(chunk["usage"].is_null());
    text += chunk["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(chunk["choices"][0]["finish_reason"], i == 3 ? Json("length") : Json(nullptr));
  }
  EXPECT_EQ(text, "abcd");
  Json usage_chunk = Json::parse(payloads[4]);
  EXPECT_EQ(usage_chunk["choices"], Json::array());
  EXPECT_EQ(usage_chunk["usage"], Json({{"prompt_tokens", 2}, {"completion_tokens", 4}, {"total_tokens", 6}}));

  // Without include_usage there is no usage chunk and no usage field.
  payloads = sse_payloads(post("/v1/completions", {{"prompt", {1}}, {"max_tokens", 2}, {"stream", true}}).body);
  ASSERT_EQ(payloads.size(), 3u);
  EXPECT_FALSE(Json::parse(payloads[0]).contains("usage"));
}

TEST_F(HttpApiTest, Http10ClientsGetStreamsDelimitedByConnectionClose) {
  start();
  CurlReply reply = post("/v1/completions", {{"prompt", {1}}, {"max_tokens", 3}, {"stream", true}}, {"--http1.0"});
  ASSERT_EQ(reply.status, 200) << reply.stderr_text;
  EXPECT_TRUE(reply.has_header("Connection: close"));
  EXPECT_FALSE(reply.has_header("Transfer-Encoding: chunked"));
  std::vector<std::string> payloads = sse_payloads(reply.body);
  ASSERT_EQ(payloads.size(), 4u) << reply.body;
  EXPECT_EQ(payloads.back(), "[DONE]");
}

TEST_F(HttpApiTest, ChatCompletion) {
  start();
  Json request = {{"model", kModelName},
                  {"messages", {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "hi"}}}},
                  {"max_completion_tokens", 3}};
  CurlReply reply = post("/v1/chat/completions", request);
  ASSERT_EQ(reply.status, 200) << reply.body;
  Json json = reply.json();
  EXPECT_EQ(json["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(json["object"], "chat.completion");
  EXPECT_EQ(json["choices"][0]["message"], Json({{"role", "assistant"}, {"content", "abc"}}));
  EXPECT_EQ(json["choices"][0]["finish_reason"], "length");
  int64_t prompt_len = ByteRenderer::chat_text(request).size();
  EXPECT_EQ(json["usage"],
            Json({{"prompt_tokens", prompt_len}, {"completion_tokens", 3}, {"total_tokens", prompt_len + 3}}));
  EXPECT_EQ(backend_->submitted().back().prompt_token_ids, renderer_.render_chat(request));
}

TEST_F(HttpApiTest, LogprobsInTheShapesOfCompletionsAndChat) {
  start();
  Json completion =
      post("/v1/completions", {{"prompt", "xy"}, {"echo", true}, {"max_tokens", 2}, {"logprobs", 2}}).json();
  EXPECT_EQ(completion["choices"][0]["text"], "xyab");
  EXPECT_EQ(completion["choices"][0]["logprobs"],
            Json({{"tokens", {"a", "b"}},
                  {"token_logprobs", {-0.25, -0.5}},
                  {"top_logprobs", {{{"a", -0.25}, {"b", -1.25}}, {{"b", -0.5}, {"c", -1.5}}}},
                  {"text_offset", {2, 3}}}));  // after the echoed prompt
  Json by_id = post("/v1/completions",
                    {{"prompt", {1}}, {"max_tokens", 1}, {"logprobs", 0}, {"return_tokens_as_token_ids", true}})
                   .json();
  EXPECT_EQ(by_id["choices"][0]["logprobs"]["top_logprobs"], Json::array({{{"token_id:97", -0.25}}}));
  EXPECT_TRUE(post("/v1/completions", {{"prompt", {1}}, {"max_tokens", 1}}).json()["choices"][0]["logprobs"].is_null());

  // Streamed: each chunk carries its own token's logprobs, offsets continuing.
  CurlReply stream = post("/v1/completions", {{"prompt", {1}}, {"max_tokens", 2}, {"logprobs", 0}, {"stream", true}});
  std::vector<std::string> chunks = sse_payloads(stream.body);
  ASSERT_EQ(chunks.size(), 3u) << stream.body;
  EXPECT_EQ(
      Json::parse(chunks[1])["choices"][0]["logprobs"],
      Json({{"tokens", {"b"}}, {"token_logprobs", {-0.5}}, {"top_logprobs", {{{"b", -0.5}}}}, {"text_offset", {1}}}));

  Json chat_request = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                       {"max_tokens", 2},
                       {"logprobs", true},
                       {"top_logprobs", 2}};
  Json first_token = {
      {"token", "a"},
      {"logprob", -0.25},
      {"bytes", {97}},
      {"top_logprobs",
       {{{"token", "a"}, {"logprob", -0.25}, {"bytes", {97}}}, {{"token", "b"}, {"logprob", -1.25}, {"bytes", {98}}}}}};
  Json chat = post("/v1/chat/completions", chat_request).json();
  ASSERT_EQ(chat["choices"][0]["logprobs"]["content"].size(), 2u) << chat.dump();
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"][0], first_token);
  chat_request["stream"] = true;
  std::vector<std::string> chat_chunks = sse_payloads(post("/v1/chat/completions", chat_request).body);
  ASSERT_EQ(chat_chunks.size(), 4u);  // role, two tokens, [DONE]
  EXPECT_TRUE(Json::parse(chat_chunks[0])["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(Json::parse(chat_chunks[1])["choices"][0]["logprobs"], Json({{"content", {first_token}}}));
  EXPECT_EQ(Json::parse(chat_chunks[2])["choices"][0]["logprobs"]["content"][0]["logprob"], -0.5);
}

TEST_F(HttpApiTest, ChatStreamSendsRoleThenContentThenFinishThenUsage) {
  start();
  CurlReply reply = post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                                  {"max_tokens", 3},
                                                  {"stream", true},
                                                  {"stream_options", {{"include_usage", true}}}});
  std::vector<std::string> payloads = sse_payloads(reply.body);
  ASSERT_EQ(payloads.size(), 6u) << reply.body;  // role, 3 content, usage, [DONE]
  Json first = Json::parse(payloads[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], Json({{"role", "assistant"}, {"content", ""}}));
  std::string content;
  for (size_t i = 1; i <= 3; ++i) {
    Json chunk = Json::parse(payloads[i]);
    content += chunk["choices"][0]["delta"]["content"].get<std::string>();
    EXPECT_EQ(chunk["choices"][0]["finish_reason"], i == 3 ? Json("length") : Json(nullptr));
    EXPECT_EQ(chunk["modality"], "text");
  }
  EXPECT_EQ(content, "abc");
  EXPECT_EQ(Json::parse(payloads[4])["usage"]["completion_tokens"], 3);
  EXPECT_EQ(payloads[5], "[DONE]");
}

TEST_F(HttpApiTest, SamplingFieldsModalitiesAndStageParamsArePassedThrough) {
  start();
  Json request = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                  {"temperature", 0.5},
                  {"top_p", 0.9},
                  {"top_k", 20},
                  {"min_p", 0.05},
                  {"repetition_penalty", 1.1},
                  {"seed", 7},
                  {"min_tokens", 2},
                  {"max_tokens", 4},
                  {"ignore_eos", true},
                  {"stop", "END"},
                  {"stop_token_ids", {151645}},
                  {"include_stop_str_in_output", true},
                  {"skip_special_tokens", false},
                  {"logprobs", true},
                  {"top_logprobs", 3},
                  {"modalities", {"text", "audio"}},
                  {"sampling_params_list", {{{"temperature", 0.0}}, {{"temperature", 0.9}, {"top_k", 50}}}},
                  {"unknown_field_vllm_ignores", 1}};
  ASSERT_EQ(post("/v1/chat/completions", request).status, 200);
  runtime::GenerationRequest submitted = backend_->submitted().back();
  EXPECT_EQ(submitted.sampling_params, Json({{"temperature", 0.5},
                                             {"top_p", 0.9},
                                             {"top_k", 20},
                                             {"min_p", 0.05},
                                             {"repetition_penalty", 1.1},
                                             {"seed", 7},
                                             {"min_tokens", 2},
                                             {"max_tokens", 4},
                                             {"ignore_eos", true},
                                             {"stop", {"END"}},
                                             {"stop_token_ids", {151645}},
                                             {"include_stop_str_in_output", true},
                                             {"skip_special_tokens", false},
                                             {"logprobs", 3}}));
  EXPECT_EQ(submitted.output_modalities, (std::vector<std::string>{"text", "audio"}));

  ASSERT_EQ(submitted.sampling_params_list.size(), 2u);
  EXPECT_EQ(submitted.sampling_params_list[1], Json({{"temperature", 0.9}, {"top_k", 50}}));

  // vLLM fields the server applies or ignores itself never reach the engine.
  ASSERT_EQ(post("/v1/completions", {{"prompt", {1, 2, 3, 4, 5}},
                                     {"truncate_prompt_tokens", 2},
                                     {"best_of", 1},
                                     {"length_penalty", 0.5},
                                     {"spaces_between_special_tokens", false},
                                     {"response_format", {{"type", "text"}}}})
                .status,
            200);
  submitted = backend_->submitted().back();
  EXPECT_EQ(submitted.prompt_token_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(submitted.sampling_params, Json({{"max_tokens", 16}}));
}

TEST_F(HttpApiTest, TokenizeAndDetokenize) {
  start();
  Json reply = post("/tokenize", {{"prompt", "ab"}, {"return_token_strs", true}}).json();
  EXPECT_EQ(reply, Json({{"count", 3},
                         {"max_model_len", 4096},
                         {"tokens", {ByteRenderer::kBos, 'a', 'b'}},
                         {"token_strs", {"<s>", "a", "b"}}}));
  Json chat = {{"messages", {{{"role", "user"}, {"content", "x"}}}}};
  EXPECT_EQ(post("/tokenize", chat).json()["tokens"], Json(renderer_.render_chat(chat)));
  EXPECT_EQ(post("/detokenize", {{"tokens", {'o', 'k'}}}).json(), Json({{"prompt", "ok"}}));
  CurlReply bad = post("/detokenize", {{"tokens", {9999}}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.json()["error"]["param"], "tokens");
}

// No dangling promises: audio asked of a pipeline that has no audio stage is a 400, not text alone.
TEST_F(HttpApiTest, ChatModalitiesTheServedPipelineCannotProduceAreRefused) {
  start({}, [](server::ApiServerOptions& o) {
    o.pipeline = "qwen3";
    o.output_modalities = {"text"};
  });
  const Json messages = {{{"role", "user"}, {"content", "hi"}}};
  for (const Json& modalities : {Json{"text", "audio"}, Json{"audio"}}) {
    CurlReply reply = post("/v1/chat/completions", {{"messages", messages}, {"modalities", modalities}});
    EXPECT_EQ(reply.status, 400) << reply.body;
    EXPECT_EQ(reply.json(),
              Json({{"error",
                     {{"message",
                       "'modalities' asks for audio, but pipeline 'qwen3' has no stage with final_output_type audio: "
                       "it produces text"},
                      {"type", "invalid_argument"},
                      {"param", "modalities"},
                      {"code", 400}}}}))
        << modalities.dump();
  }
  EXPECT_TRUE(backend_->submitted().empty()) << "nothing reached the backend";
  CurlReply text = post("/v1/chat/completions", {{"messages", messages}, {"modalities", {"text"}}});
  EXPECT_EQ(text.status, 200) << text.body;
  ASSERT_EQ(backend_->submitted().size(), 1u);
  EXPECT_EQ(backend_->submitted()[0].output_modalities, std::vector<std::string>{"text"});
}

// The server states the ranges the engine applies (config/sampling_ranges.h), naming field and range.
TEST_F(HttpApiTest, SamplingRangeErrorsNameTheFieldAndTheAllowedRange) {
  start();
  auto message = [&](const Json& body) {
    CurlReply reply = post("/v1/completions", body);
    EXPECT_EQ(reply.status, 400) << reply.body;
    return reply.json()["error"]["message"].get<std::string>();
  };
  EXPECT_EQ(message({{"prompt", {1}}, {"top_p", 0}}), "'top_p' must be in (0, 1], got 0");
  EXPECT_EQ(message({{"prompt", {1}}, {"top_k", -2}}), "'top_k' must be -1 or 0 (all tokens) or at least 1, got -2");
  EXPECT_EQ(message({{"prompt", {1}}, {"presence_penalty", 2.5}}), "'presence_penalty' must be in [-2, 2], got 2.5");
  EXPECT_EQ(message({{"prompt", {1}}, {"repetition_penalty", 0}}), "'repetition_penalty' must be > 0, got 0");
  EXPECT_EQ(message({{"prompt", {1}}, {"logprobs", 21}}), "'logprobs' must be in [0, 20], got 21");
  EXPECT_EQ(message({{"prompt", {1}}, {"max_tokens", 0}}), "'max_tokens' must be at least 1, got 0");
}

// Each error status, in OpenAI's shape, naming the field where there is one; the server stays
// healthy after all of them.
TEST_F(HttpApiTest, ErrorsAreOpenAiShapedAndLeaveTheServerHealthy) {
  start({}, [](server::ApiServerOptions& o) { o.http_limits.max_body_bytes = 1024; });
  auto expect_error = [](const CurlReply& reply, int status, const Json& param) {
    EXPECT_EQ(reply.status, status) << reply.body;
    Json error = reply.json()["error"];
    EXPECT_TRUE(error["message"].is_string() && !error["message"].get<std::string>().empty()) << reply.body;
    EXPECT_TRUE(error["type"].is_string()) << reply.body;
    EXPECT_EQ(error["param"], param) << reply.body;
    EXPECT_EQ(error["code"], status) << reply.body;
  };
  expect_error(post_raw("/v1/completions", "{\"prompt\": [1,"), 400, "body");
  expect_error(post_raw("/v1/completions", "[1, 2]"), 400, "body");
  expect_error(post("/v1/completions", {{"prompt", {1}}, {"temperature", "hot"}}), 400, "temperature");
  expect_error(post("/v1/completions", {{"prompt", {1}}, {"top_p", 0}}), 400, "top_p");
  expect_error(post("/v1/completions", {{"prompt", {1}}, {"max_tokens", 0}}), 400, "max_tokens");
  expect_error(post("/v1/completions", {{"max_tokens", 3}}), 400, "prompt");
  expect_error(post("/v1/completions", {{"prompt", {1, 600}}}), 400, "prompt");
  expect_error(post("/v1/completions", {{"prompt", {1}}, {"stream_options", {{"include_usage", true}}}}), 400,
               "stream_options");
  expect_error(post("/v1/chat/completions", {{"max_tokens", 3}}), 400, "messages");
  expect_error(post("/v1/chat/completions", {{"messages", {{{"content", "x"}}}}}), 400, "messages[0].role");
  expect_error(post("/v1/chat/completions", {{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}), 400,
               "messages[0].role");
  expect_error(
      post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"top_logprobs", 2}}), 400,
      "top_logprobs");
  // vLLM fields the engine does not implement are refused by name, not silently ignored.
  for (const char* field : {"bad_words", "allowed_token_ids", "prompt_logprobs", "guided_json"}) {
    expect_error(post("/v1/completions", {{"prompt", {1}}, {field, {"x"}}}), 400, field);
  }
  expect_error(post("/v1/completions", {{"prompt", {1}}, {"n", 2}, {"best_of", 3}}), 400, "best_of");
  expect_error(post("/v1/completions", {{"prompt", {1}}, {"response_format", {{"type", "json_object"}}}}), 400,
               "response_format");
  CurlReply unknown_model = post("/v1/completions", {{"model", "gpt-9"}, {"prompt", {1}}});
  expect_error(unknown_model, 404, nullptr);
  EXPECT_NE(unknown_model.json()["error"]["message"].get<std::string>().find("gpt-9"), std::string::npos);
  expect_error(get("/v2/nothing"), 404, nullptr);
  CurlReply wrong_method = get("/v1/completions");
  expect_error(wrong_method, 405, nullptr);
  EXPECT_TRUE(wrong_method.has_header("Allow: POST"));
  expect_error(post_raw("/v1/completions", std::string(4096, ' ')), 413, nullptr);

  backend_->fail_submits(Error(ErrorCode::kUnavailable, "stage 1 (talker) is down"));
  CurlReply unavailable = post("/v1/completions", {{"prompt", {1}}});
  expect_error(unavailable, 503, nullptr);
  EXPECT_NE(unavailable.body.find("talker"), std::string::npos);
  backend_->fail_submits(std::nullopt);

  EXPECT_EQ(get("/health").status, 200);
  EXPECT_EQ(post("/v1/completions", {{"prompt", {1}}, {"max_tokens", 1}}).json()["choices"][0]["text"], "a");
}

TEST_F(HttpApiTest, ApiKeyGuardsTheV1RoutesOnly) {
  start({}, [](server::ApiServerOptions& o) { o.api_keys = {"sekrit"}; });
  CurlReply missing = get("/v1/models");
  EXPECT_EQ(missing.status, 401);
  EXPECT_EQ(missing.json()["error"]["code"], 401);
  EXPECT_EQ(get("/v1/models", {"-H", "Authorization: Bearer wrong"}).status, 401);
  EXPECT_EQ(post("/v1/completions", {{"prompt", {1}}}, {"-H", "Authorization: Bearer sekri"}).status, 401);
  EXPECT_EQ(get("/v1/models", {"-H", "Authorization: Bearer sekrit"}).status, 200);
  EXPECT_EQ(get("/health").status, 200);
  EXPECT_EQ(get("/version").status, 200);
  EXPECT_EQ(get("/metrics").status, 200);
}

TEST_F(HttpApiTest, ErrorsDuringGenerationEndTheResponseCleanly) {
  start();
  backend_->fail_after_tokens(2, Error(ErrorCode::kInternal, "stage 0 (thinker) exited with status 139"));
  CurlReply plain = post("/v1/completions", {{"prompt", {1}}, {"max_tokens", 5}});
  EXPECT_EQ(plain.status, 500);
  EXPECT_NE(plain.json()["error"]["message"].get<std::string>().find("thinker"), std::string::npos);

  CurlReply streamed = post("/v1/completions", {{"prompt", {1}}, {"max_tokens", 5}, {"stream", true}});
  std::vector<std::string> payloads = sse_payloads(streamed.body);
  ASSERT_EQ(payloads.size(), 4u) << streamed.body;  // a, b, error, [DONE]
  EXPECT_EQ(Json::parse(payloads[2])["error"]["code"], 500);
  EXPECT_EQ(payloads[3], "[DONE]");
  backend_->fail_after_tokens(0, std::nullopt);
  EXPECT_EQ(get("/health").status, 200);
}

TEST_F(HttpApiTest, KeepAliveReusesTheConnection) {
  start();
  // num_connects is 0 for a transfer that reused an open connection.
  CurlReply reply = run_curl({"-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null", "-w", "%{num_connects}\n",
                              url("/health"), url("/v1/models"), url("/version")});
  EXPECT_NE(reply.body.find("1\n0\n0"), std::string::npos) << reply.body;

  // Two requests on one raw connection, the second sent only after the first was answered.
  RawConnection connection(server_->port());
  std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 33\r\n\r\n"
      "{\"prompt\": [1], \"max_tokens\": 2}\n";
  connection.send(request);
  std::string first = connection.read_until("\"total_tokens\":3}}");
  connection.send(request);
  ASSERT_NE(first.find("\"total_tokens\":3}}"), std::string::npos) << first;
  std::string both = connection.read_until("\"total_tokens\":3}}", 5s, first.size());
  EXPECT_NE(both.find("\"total_tokens\":3}}", first.size()), std::string::npos) << both;

  // Pipelined: the second request arrives while the first is being answered.
  RawConnection pipelined(server_->port());
  pipelined.send(request + request);
  std::string answers = pipelined.read_until("\"total_tokens\":3}}", 5s);
  answers = pipelined.read_until("\"total_tokens\":3}}", 5s, answers.find("\"total_tokens\":3}}") + 1);
  EXPECT_EQ(answers.find("HTTP/1.1 200 OK", answers.find("HTTP/1.1 200 OK") + 1) == std::string::npos, false)
      << answers;
}

TEST_F(HttpApiTest, ClientDisconnectMidStreamAbortsTheRequest) {
  start({.token_delay = 5ms});
  RawConnection connection(server_->port());
  std::string body = R"({"prompt": [1], "max_tokens": 4000, "stream": true})";
  connection.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                  std::to_string(body.size()) + "\r\n\r\n" + body);
  std::string received = connection.read_until("\"text\":\"c\"");
  ASSERT_NE(received.find("\"text\":\"c\""), std::string::npos) << received;
  connection.close();
  ASSERT_TRUE(backend_->wait_idle(5s));
  auto aborted = backend_->aborted();
  ASSERT_EQ(aborted.size(), 1u);
  EXPECT_EQ(aborted[0], backend_->submitted()[0].request_id);

  // The same for a request that is not streamed: nothing is written until it ends.
  RawConnection quiet(server_->port());
  body = R"({"prompt": [1], "max_tokens": 4000})";
  quiet.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
             std::to_string(body.size()) + "\r\n\r\n" + body);
  for (int i = 0; i < 500 && backend_->live_requests() == 0; ++i) std::this_thread::sleep_for(2ms);
  quiet.close();
  ASSERT_TRUE(backend_->wait_idle(5s));
  EXPECT_EQ(backend_->aborted().size(), 2u);

  std::string metrics = get("/metrics").body;
  EXPECT_EQ(metric_value(metrics, "vllm:num_requests_running{model_name=\"test-model\"}"), 0);
  EXPECT_EQ(metric_value(metrics, "vllm:request_success_total{model_name=\"test-model\",finished_reason=\"abort\"}"),
            2);
}

TEST_F(HttpApiTest, MetricsCountRequestsAndTokens) {
  start();
  std::string before = get("/metrics").body;
  EXPECT_EQ(metric_value(before, "vllm:prompt_tokens_total{model_name=\"test-model\"}"), 0);
  EXPECT_NE(before.find("# TYPE vllm:time_to_first_token_seconds histogram"), std::string::npos);
  for (int i = 0; i < 3; ++i) post("/v1/completions", {{"prompt", {1, 2, 3, 4}}, {"max_tokens", 5}});
  post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"stream", true}});
  std::string after = get("/metrics").body;
  int64_t chat_prompt = ByteRenderer::chat_text({{"messages", {{{"role", "user"}, {"content", "x"}}}}}).size();
  EXPECT_EQ(metric_value(after, "vllm:prompt_tokens_total{model_name=\"test-model\"}"), 12 + chat_prompt);
  EXPECT_EQ(metric_value(after, "vllm:generation_tokens_total{model_name=\"test-model\"}"), 15 + 8);
  EXPECT_EQ(metric_value(after, "vllm:request_success_total{model_name=\"test-model\",finished_reason=\"length\"}"), 3);
  EXPECT_EQ(metric_value(after, "vllm:request_success_total{model_name=\"test-model\",finished_reason=\"stop\"}"), 1);
  EXPECT_EQ(metric_value(after, "vllm:time_to_first_token_seconds_count{model_name=\"test-model\"}"), 4);
  EXPECT_EQ(metric_value(after, "vllm:e2e_request_latency_seconds_count{model_name=\"test-model\"}"), 4);
  EXPECT_EQ(metric_value(after, "vllm:inter_token_latency_seconds_count{model_name=\"test-model\"}"), 3 * 4 + 7);
  EXPECT_EQ(metric_value(after, "vllm:num_requests_running{model_name=\"test-model\"}"), 0);
  EXPECT_EQ(metric_value(after, "vllm:num_requests_waiting{model_name=\"test-model\"}"), 0);
  EXPECT_EQ(metric_value(after, "omnistage:http_request_preprocess_seconds_count{model_name=\"test-model\"}"), 4);
  EXPECT_EQ(metric_value(after, "omnistage:http_response_postprocess_seconds_count{model_name=\"test-model\"}"), 4);
  EXPECT_GT(metric_value(after, "omnistage:http_request_preprocess_seconds_sum{model_name=\"test-model\"}"), 0);
}

TEST_F(HttpApiTest, StopAbortsStreamsThatOutliveTheDrainTimeout) {
  start({.token_delay = 5ms});
  CurlReply reply;
  std::thread client([&] {
    reply = post("/v1/completions", {{"prompt", {1}}, {"max_tokens", 4000}, {"stream", true}});
  });
  for (int i = 0; i < 1000 && backend_->live_requests() == 0; ++i) std::this_thread::sleep_for(2ms);
  auto started = std::chrono::steady_clock::now();
  server_->stop();
  client.join();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 4s);
  EXPECT_EQ(backend_->aborted().size(), 1u);
  std::vector<std::string> payloads = sse_payloads(reply.body);
  ASSERT_GE(payloads.size(), 2u);
  EXPECT_EQ(payloads.back(), "[DONE]");
  EXPECT_EQ(Json::parse(payloads[payloads.size() - 2])["choices"][0]["finish_reason"], "abort");
  // A stopped server accepts nothing.
  EXPECT_NE(run_curl({"--max-time", "2", url("/health")}).exit_code, 0);
}

}  // namespace
}  // namespace omni::testing
