// Routing without processes: the router's messages to replicas are recorded, the replicas' outputs
// are fed in by hand.
#include "runtime/request_router.h"

#include <gtest/gtest.h>

namespace omni::runtime {
namespace {

struct Sent {
  std::string to;  // the replica's identity
  StageMessage message;
};

// stage 0 (entry) → stage 1 (final, text); stage 1 async_chunk when asked.
PipelineSpec two_stage_pipeline(bool async_chunk) {
  PipelineSpec p;
  p.stages.resize(2);
  p.stages[0] = {0, {}, false, "latents"};
  p.stages[1] = {1, {0}, true, "text"};
  p.stages[1].async_chunk = async_chunk;
  return p;
}

class RequestRouterTest : public ::testing::Test {
 protected:
  void build(bool async_chunk, int edge_limit = 64, int consumer_replicas = 1) {
    pipeline_ = two_stage_pipeline(async_chunk);
    pipeline_.stages[1].num_replicas = consumer_replicas;
    replicas_ = std::make_unique<ReplicaSet>(pipeline_);
    for (int stage = 0; stage < replicas_->num_stages(); ++stage) {
      for (Replica& replica : replicas_->stage(stage)) replica.phase = ReplicaPhase::kReady;
    }
    RouterLinks links{
        [this](const Replica& replica, const StageMessage& message) {
          if (!connected_) return false;
          sent_.push_back({replica.identity, message});
          return true;
        },
        [this](Replica& replica, const std::string& reason) { failed_.push_back(replica.identity + ": " + reason); },
        [this](const std::string& id) { closed_.push_back(id); }};
    router_ = std::make_unique<RequestRouter>(pipeline_, *replicas_, ConnectorContext{"routertest", 65536}, edge_limit,
                                              std::move(links));
  }

  void start(const std::string& id, std::vector<int32_t> prompt = {1, 2, 3}, bool stream = true) {
    GenerationRequest request;
    request.request_id = id;
    request.stream = stream;
    request.prompt_token_ids = std::move(prompt);
    request.additional_information = {{"voice", "v"}};
    RequestPlan plan = plan_request(pipeline_, request);
    router_->start(
        std::move(request), [this, id](ResponseEvent event) { events_[id].push_back(std::move(event)); },
        std::move(plan), RequestRouter::Clock::now());
  }

  // An output of `stage` for `id`, with one inline payload for stage 1 when `to_next` is set.
  void output(int stage, const std::string& id, std::vector<int32_t> tokens, bool finished, int chunk = 0,
              std::string text = "") {
    OutputMessage out;
    out.request_id = id;
    out.token_ids = std::move(tokens);
    out.text = std::move(text);
    if (finished) out.finish_reason = "stop";
    if (stage == 0) {
      PayloadRef ref;
      ref.connector = std::string(kDefaultConnectorName);
      ref.address = {id, 0, 1, chunk};
      ref.size = 1;
      ref.inline_bytes = {static_cast<uint8_t>(chunk)};
      out.payloads.push_back(ref);
    }
    router_->on_output(replicas_->at(stage, 0), out);
  }

  // The messages sent since the previous call.
  std::vector<Sent> take_sent() { return std::exchange(sent_, {}); }

  PipelineSpec pipeline_;
  std::unique_ptr<ReplicaSet> replicas_;
  std::unique_ptr<RequestRouter> router_;
  bool connected_ = true;
  std::vector<Sent> sent_;
  std::vector<std::string> failed_;
  std::vector<std::string> closed_;
  std::map<std::string, std::vector<ResponseEvent>> events_;
};

TEST_F(RequestRouterTest, FullPayloadStartsTheConsumerWithTheSourcesTokensAndPayloadsOnceItFinished) {
  build(/*async_chunk=*/false);
  start("r");
  std::vector<Sent> sent = take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].to, "stage0.replica0");
  const auto& entry = std::get<SubmitMessage>(sent[0].message);
  EXPECT_EQ(entry.prompt_token_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(entry.output_stages, std::vector<int>{1});
  EXPECT_EQ(entry.additional_information, Json({{"voice", "v"}}));
  EXPECT_EQ(replicas_->at(0, 0).requests, std::set<std::string>{"r"});

  output(0, "r", {7, 8}, false, 0);
  EXPECT_TRUE(take_sent().empty()) << "full payload: the consumer waits for its source to finish";
  output(0, "r", {9}, true, 1);
  sent = take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].to, "stage1.replica0");
  const auto& next = std::get<SubmitMessage>(sent[0].message);
  EXPECT_EQ(next.prompt_token_ids, (std::vector<int32_t>{7, 8, 9}));
  ASSERT_EQ(next.inputs.size(), 2u);
  EXPECT_EQ(next.inputs[0].address.chunk, 0);
  EXPECT_EQ(next.inputs[1].address.chunk, 1);
  EXPECT_FALSE(next.input_open);
  EXPECT_TRUE(replicas_->at(0, 0).requests.empty()) << "stage 0 is done with it";
  EXPECT_EQ(router_->in_flight(0, 1), 1);
  EXPECT_TRUE(events_["r"].empty()) << "stage 0 is not the final stage";

  output(1, "r", {4, 5}, true, 0, "hi");
  ASSERT_EQ(events_["r"].size(), 1u);
  const ResponseEvent& event = events_["r"][0];
  EXPECT_EQ(event.text, "hi");
  EXPECT_EQ(event.token_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(event.finish_reason, "stop");
  EXPECT_TRUE(event.finished);
  EXPECT_EQ(event.prompt_tokens, 3);
  EXPECT_EQ(event.completion_tokens, 2);
  EXPECT_EQ(closed_, std::vector<std::string>{"r"});
  EXPECT_FALSE(router_->live("r"));
  EXPECT_EQ(router_->in_flight(0, 1), 0);
}

TEST_F(RequestRouterTest, AsyncChunkStartsOnTheFirstOutputAndStreamsTheRestAsInputChunks) {
  build(/*async_chunk=*/true);
  start("r");
  take_sent();
  output(0, "r", {5}, false, 0);
  std::vector<Sent> sent = take_sent();
  ASSERT_EQ(sent.size(), 1u);
  const auto& submit = std::get<SubmitMessage>(sent[0].message);
  EXPECT_EQ(sent[0].to, "stage1.replica0");
  EXPECT_EQ(submit.prompt_token_ids, std::vector<int32_t>{5});
  ASSERT_EQ(submit.inputs.size(), 1u);
  EXPECT_EQ(submit.inputs[0].address.chunk, 0);
  EXPECT_TRUE(submit.input_open);

  output(0, "r", {6}, false, 1);
  output(0, "r", {7}, true, 2);
  sent = take_sent();
  ASSERT_EQ(sent.size(), 2u);
  const auto& second = std::get<InputChunkMessage>(sent[0].message);
  EXPECT_EQ(second.token_ids, std::vector<int32_t>{6});
  ASSERT_EQ(second.payloads.size(), 1u);
  EXPECT_EQ(second.payloads[0].address.chunk, 1);
  EXPECT_FALSE(second.last);
  const auto& last = std::get<InputChunkMessage>(sent[1].message);
  EXPECT_EQ(last.token_ids, std::vector<int32_t>{7});
  EXPECT_TRUE(last.last);
}

TEST_F(RequestRouterTest, AFullEdgeHoldsAnAsyncChunkConsumerAndItsChunksUntilThereIsRoom) {
  build(/*async_chunk=*/true, /*edge_limit=*/1);
  start("a");
  start("b");
  take_sent();
  output(0, "a", {1}, false, 0);
  ASSERT_EQ(take_sent().size(), 1u) << "a starts at stage 1";
  output(0, "b", {10}, false, 0);
  output(0, "b", {11}, true, 1);
  EXPECT_TRUE(take_sent().empty()) << "the edge holds one request: b waits in the head";
  EXPECT_EQ(router_->waiting(1), 1u);
  EXPECT_EQ(router_->in_flight(0, 1), 1);

  output(0, "a", {2}, true, 1);
  take_sent();  // a's last chunk
  output(1, "a", {}, true, 0, "done");
  EXPECT_EQ(events_["a"].back().text, "done");
  std::vector<Sent> sent = take_sent();
  ASSERT_EQ(sent.size(), 2u) << "b starts with its first chunk, then gets the one buffered after it";
  const auto& submit = std::get<SubmitMessage>(sent[0].message);
  EXPECT_EQ(submit.request_id, "b");
  EXPECT_EQ(submit.prompt_token_ids, std::vector<int32_t>{10});
  EXPECT_TRUE(submit.input_open);
  const auto& chunk = std::get<InputChunkMessage>(sent[1].message);
  EXPECT_EQ(chunk.token_ids, std::vector<int32_t>{11});
  EXPECT_TRUE(chunk.last);
  EXPECT_EQ(router_->waiting(1), 0u);
  EXPECT_EQ(router_->in_flight(0, 1), 1);
}

TEST_F(RequestRouterTest, AStagesErrorEndsOnlyThatRequestNamingTheStage) {
  build(/*async_chunk=*/false);
  start("bad");
  start("good");
  take_sent();
  router_->on_error(replicas_->at(0, 0), ErrorMessage{"bad", ErrorCode::kInvalidArgument, "voice 'x' is unknown"});
  ASSERT_EQ(events_["bad"].size(), 1u);
  const ResponseEvent& event = events_["bad"][0];
  ASSERT_TRUE(event.error.has_value());
  EXPECT_EQ(event.error->code(), ErrorCode::kInvalidArgument);
  EXPECT_STREQ(event.error->what(), "stage 0: voice 'x' is unknown");
  EXPECT_TRUE(event.finished);
  EXPECT_TRUE(take_sent().empty()) << "the stage already dropped it: no Abort";
  EXPECT_EQ(replicas_->at(0, 0).requests, std::set<std::string>{"good"});
  EXPECT_TRUE(router_->live("good"));
  EXPECT_FALSE(router_->live("bad"));
}

TEST_F(RequestRouterTest, AbortReachesEveryStageStillWorkingOnTheRequest) {
  build(/*async_chunk=*/true);
  start("r");
  output(0, "r", {5}, false, 0);
  take_sent();
  router_->end_request("r", std::nullopt);
  std::vector<Sent> sent = take_sent();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].to, "stage0.replica0");
  EXPECT_EQ(std::get<AbortMessage>(sent[0].message).request_id, "r");
  EXPECT_EQ(sent[1].to, "stage1.replica0");
  ASSERT_EQ(events_["r"].size(), 1u);
  EXPECT_EQ(events_["r"][0].finish_reason, "abort");
  EXPECT_FALSE(events_["r"][0].error.has_value());
  EXPECT_EQ(router_->in_flight(0, 1), 0);
  EXPECT_TRUE(replicas_->at(1, 0).requests.empty());

  output(0, "r", {6}, false, 1);
  EXPECT_TRUE(take_sent().empty()) << "an output after the end is dropped";
}

TEST_F(RequestRouterTest, AStageWithoutAReadyReplicaEndsTheRequestUnavailable) {
  build(/*async_chunk=*/false);
  std::set<std::string> affected;
  replicas_->fail(replicas_->at(1, 0), "gone", affected);
  start("r");
  output(0, "r", {1}, true, 0);
  ASSERT_EQ(events_["r"].size(), 1u);
  ASSERT_TRUE(events_["r"][0].error.has_value());
  EXPECT_EQ(events_["r"][0].error->code(), ErrorCode::kUnavailable);
  EXPECT_STREQ(events_["r"][0].error->what(), "stage 1 has no live replica");
  EXPECT_EQ(router_->in_flight(0, 1), 0);
  EXPECT_EQ(closed_, std::vector<std::string>{"r"});
}

TEST_F(RequestRouterTest, ALostControlConnectionFailsTheReplica) {
  build(/*async_chunk=*/false);
  connected_ = false;
  start("r");
  EXPECT_EQ(failed_, std::vector<std::string>{"stage0.replica0: its control connection is gone"});
}

TEST_F(RequestRouterTest, EndAllEndsEveryLiveRequestWithTheError) {
  build(/*async_chunk=*/false);
  start("a");
  start("b");
  router_->end_all(Error(ErrorCode::kUnavailable, "the server is shutting down"));
  for (const char* id : {"a", "b"}) {
    ASSERT_EQ(events_[id].size(), 1u) << id;
    EXPECT_STREQ(events_[id][0].error->what(), "the server is shutting down");
  }
  EXPECT_EQ(router_->live_requests(), 0u);
}

TEST(RequestRouterConfigTest, AnEdgeLimitBelowOneIsAConfigError) {
  const PipelineSpec pipeline = two_stage_pipeline(false);
  ReplicaSet replicas(pipeline);
  try {
    RequestRouter router(pipeline, replicas, ConnectorContext{"routertest", 65536}, 0, {});
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_STREQ(e.what(), "edge in-flight limit must be at least 1, not 0");
  }
}

}  // namespace
}  // namespace omni::runtime

namespace omni::runtime {
namespace {

// An output of stage 1's replica `replica` for `id`.
OutputMessage final_output(const std::string& id, std::vector<int32_t> tokens, bool finished) {
  OutputMessage out;
  out.request_id = id;
  out.token_ids = std::move(tokens);
  if (finished) out.finish_reason = "stop";
  return out;
}

TEST_F(RequestRouterTest, ALostReplicasRequestIsReplayedWithItsSubmitAndChunksWhileItsClientHasNothing) {
  build(/*async_chunk=*/true, 64, /*consumer_replicas=*/2);
  router_->enable_replay();
  start("q", {1, 2, 3}, /*stream=*/false);
  output(0, "q", {7}, false, 0);
  Replica& lost = replicas_->at(1, 0);
  OutputMessage partial = final_output("q", {40, 41}, false);
  router_->on_output(lost, partial);
  EXPECT_TRUE(events_["q"].empty()) << "a non-streaming request's events wait in the head";
  output(0, "q", {8}, true, 1);
  std::vector<Sent> before = take_sent();
  ASSERT_EQ(before.size(), 3u);  // Submit to stage 0, Submit and InputChunk to stage 1 replica 0
  EXPECT_EQ(before[1].to, "stage1.replica0");

  lost.phase = ReplicaPhase::kDown;
  std::set<std::string> held = std::exchange(lost.requests, {});
  router_->replica_lost(lost, held, "stage 1 (replica 0) failed: its process ended");
  std::vector<Sent> replay = take_sent();
  ASSERT_EQ(replay.size(), 2u);
  EXPECT_EQ(replay[0].to, "stage1.replica1");
  EXPECT_EQ(std::get<SubmitMessage>(replay[0].message).prompt_token_ids,
            std::get<SubmitMessage>(before[1].message).prompt_token_ids);
  EXPECT_TRUE(std::get<SubmitMessage>(replay[0].message).input_open);
  EXPECT_EQ(replay[1].to, "stage1.replica1");
  EXPECT_TRUE(std::get<InputChunkMessage>(replay[1].message).last);
  EXPECT_EQ(replicas_->at(1, 1).requests, std::set<std::string>{"q"});

  OutputMessage stale = final_output("q", {99}, true);
  router_->on_output(lost, stale);  // what the lost replica sent before it died is ignored
  OutputMessage done = final_output("q", {50}, true);
  router_->on_output(replicas_->at(1, 1), done);
  ASSERT_EQ(events_["q"].size(), 1u);
  EXPECT_EQ(events_["q"][0].token_ids, std::vector<int32_t>{50}) << "only the replay's output reaches the client";
  EXPECT_EQ(events_["q"][0].completion_tokens, 1);
  EXPECT_TRUE(events_["q"][0].finished);
  EXPECT_FALSE(events_["q"][0].error);
}

TEST_F(RequestRouterTest, ARequestStreamingToItsClientEndsWithTheLostReplicaNamed) {
  build(/*async_chunk=*/true, 64, /*consumer_replicas=*/2);
  router_->enable_replay();
  start("s");
  output(0, "s", {7}, false, 0);
  Replica& lost = replicas_->at(1, 0);
  OutputMessage first = final_output("s", {40}, false);
  router_->on_output(lost, first);
  ASSERT_EQ(events_["s"].size(), 1u) << "a streaming request's events go out at once";
  take_sent();
  lost.phase = ReplicaPhase::kDown;
  std::set<std::string> held = std::exchange(lost.requests, {});
  router_->replica_lost(lost, held, "stage 1 (replica 0) failed: its process ended");
  ASSERT_EQ(events_["s"].size(), 2u);
  ASSERT_TRUE(events_["s"][1].error);
  EXPECT_EQ(std::string(events_["s"][1].error->what()),
            "stage 1 (replica 0) failed: its process ended while its output was streaming to the client");
  EXPECT_FALSE(router_->live("s"));
  // The entry stage still working on it is told to stop.
  std::vector<Sent> sent = take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<AbortMessage>(sent[0].message));
}

}  // namespace
}  // namespace omni::runtime
