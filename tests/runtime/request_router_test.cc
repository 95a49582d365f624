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
    PipelineSpec pipeline = two_stage_pipeline(async_chunk);
    pipeline.stages[1].num_replicas = consumer_replicas;
    build_with(std::move(pipeline), edge_limit);
  }

  void build_with(PipelineSpec pipeline, int edge_limit = 64) {
    pipeline_ = std::move(pipeline);
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

  void start(const std::string& id, std::vector<int32_t> prompt = {1, 2, 3}, bool stream = true,
             std::vector<std::string> modalities = {}) {
    GenerationRequest request;
    request.request_id = id;
    request.output_modalities = std::move(modalities);
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

namespace omni::runtime {
namespace {

// thinker (text, final) → talker → code2wav (audio, final), full payload: the Qwen3-Omni shape.
PipelineSpec text_and_audio_pipeline() {
  PipelineSpec p;
  p.stages = {{0, {}, true, "text"}, {1, {0}, false, "latents"}, {2, {1}, true, "audio"}};
  return p;
}

OutputMessage stage_output(const std::string& id, std::vector<int32_t> tokens, bool finished, std::string text = "",
                           std::vector<float> audio = {}) {
  OutputMessage out;
  out.request_id = id;
  out.token_ids = std::move(tokens);
  out.text = std::move(text);
  if (!audio.empty()) out.audio_sample_rate = 24000;
  out.audio = std::move(audio);
  if (finished) out.finish_reason = "stop";
  return out;
}

class TextAndAudioRouterTest : public RequestRouterTest {
 protected:
  void SetUp() override { build_with(text_and_audio_pipeline()); }
  void feed(int stage, OutputMessage out) { router_->on_output(replicas_->at(stage, 0), out); }
};

TEST_F(TextAndAudioRouterTest, TheRequestFinishesOnlyAfterItsTextAndItsAudioFinished) {
  start("r");
  feed(0, stage_output("r", {11}, false, "He"));
  feed(0, stage_output("r", {12}, true, "y"));
  ASSERT_EQ(events_["r"].size(), 2u);
  const ResponseEvent& text_end = events_["r"][1];
  EXPECT_EQ(text_end.modality, "text");
  EXPECT_EQ(text_end.stage_id, 0);
  EXPECT_EQ(text_end.text, "y");
  EXPECT_EQ(text_end.finish_reason, "stop");
  EXPECT_TRUE(text_end.output_finished);
  EXPECT_FALSE(text_end.finished) << "the audio is still to come";
  EXPECT_EQ(text_end.completion_tokens, 2);
  EXPECT_TRUE(router_->live("r"));
  EXPECT_TRUE(closed_.empty());
  std::vector<Sent> sent = take_sent();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[1].to, "stage1.replica0");
  EXPECT_EQ(std::get<SubmitMessage>(sent[1].message).prompt_token_ids, (std::vector<int32_t>{11, 12}));

  feed(1, stage_output("r", {500, 501, 502}, true));
  EXPECT_EQ(events_["r"].size(), 2u) << "the talker's output goes to code2wav, not to the client";
  sent = take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].to, "stage2.replica0");

  feed(2, stage_output("r", {}, false, "", {0.25f, -0.5f}));
  feed(2, stage_output("r", {}, true, "", {0.125f}));
  ASSERT_EQ(events_["r"].size(), 4u);
  const ResponseEvent& first_audio = events_["r"][2];
  EXPECT_EQ(first_audio.modality, "audio");
  EXPECT_EQ(first_audio.stage_id, 2);
  EXPECT_EQ(first_audio.audio, (std::vector<float>{0.25f, -0.5f}));
  EXPECT_EQ(first_audio.audio_sample_rate, 24000);
  EXPECT_FALSE(first_audio.output_finished);
  EXPECT_FALSE(first_audio.finished);
  const ResponseEvent& last = events_["r"][3];
  EXPECT_EQ(last.audio, std::vector<float>{0.125f});
  EXPECT_TRUE(last.output_finished);
  EXPECT_TRUE(last.finished);
  EXPECT_EQ(last.prompt_tokens, 3);
  EXPECT_EQ(last.completion_tokens, 2) << "usage counts the text stage's tokens, not the talker's";
  EXPECT_EQ(closed_, std::vector<std::string>{"r"});
  EXPECT_FALSE(router_->live("r"));
  EXPECT_TRUE(take_sent().empty()) << "every stage finished by itself: no Abort";
}

TEST_F(TextAndAudioRouterTest, AudioOnlyRunsTheThinkerButDeliversOnlyTheAudio) {
  start("a", {1, 2}, true, {"audio"});
  feed(0, stage_output("a", {11, 12, 13}, true, "Hey"));
  EXPECT_TRUE(events_["a"].empty());
  feed(1, stage_output("a", {500}, true));
  feed(2, stage_output("a", {}, true, "", {0.5f}));
  ASSERT_EQ(events_["a"].size(), 1u);
  EXPECT_EQ(events_["a"][0].modality, "audio");
  EXPECT_EQ(events_["a"][0].audio, std::vector<float>{0.5f});
  EXPECT_TRUE(events_["a"][0].finished);
  EXPECT_EQ(events_["a"][0].completion_tokens, 3);
  EXPECT_FALSE(router_->live("a"));
}

TEST_F(TextAndAudioRouterTest, TextOnlyRunsOnlyTheThinkerAndFinishesWithIt) {
  start("t", {1}, true, {"text"});
  ASSERT_EQ(take_sent().size(), 1u);
  feed(0, stage_output("t", {11}, true, "Hi"));
  ASSERT_EQ(events_["t"].size(), 1u);
  EXPECT_EQ(events_["t"][0].modality, "text");
  EXPECT_TRUE(events_["t"][0].output_finished);
  EXPECT_TRUE(events_["t"][0].finished);
  EXPECT_TRUE(take_sent().empty()) << "nothing goes to the talker";
  EXPECT_FALSE(router_->live("t"));
}

TEST_F(TextAndAudioRouterTest, AnErrorFromTheAudioStageEndsTheRequestAfterItsTextFinished) {
  start("e");
  feed(0, stage_output("e", {11}, true, "Hi"));
  feed(1, stage_output("e", {500}, true));
  take_sent();
  router_->on_error(replicas_->at(2, 0), ErrorMessage{"e", ErrorCode::kInvalidArgument, "voice 'x' is unknown"});
  ASSERT_EQ(events_["e"].size(), 2u);
  const ResponseEvent& last = events_["e"][1];
  ASSERT_TRUE(last.error.has_value());
  EXPECT_STREQ(last.error->what(), "stage 2: voice 'x' is unknown");
  EXPECT_EQ(last.modality, "");
  EXPECT_TRUE(last.finished);
  EXPECT_FALSE(router_->live("e"));
}

TEST_F(TextAndAudioRouterTest, AbortAfterTheTextStopsTheStagesStillWorking) {
  start("x");
  feed(0, stage_output("x", {11}, true, "Hi"));
  take_sent();
  router_->end_request("x", std::nullopt);
  std::vector<Sent> sent = take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].to, "stage1.replica0");
  EXPECT_EQ(std::get<AbortMessage>(sent[0].message).request_id, "x");
  ASSERT_EQ(events_["x"].size(), 2u);
  EXPECT_EQ(events_["x"][1].finish_reason, "abort");
  EXPECT_TRUE(events_["x"][1].finished);
  EXPECT_TRUE(replicas_->at(1, 0).requests.empty());
}

TEST_F(TextAndAudioRouterTest, ANonStreamingRequestsHeldTextSurvivesTheReplayOfItsAudioStage) {
  PipelineSpec pipeline = text_and_audio_pipeline();
  pipeline.stages[2].num_replicas = 2;
  build_with(std::move(pipeline));
  router_->enable_replay();
  start("q", {1}, /*stream=*/false);
  feed(0, stage_output("q", {11}, true, "Hi"));
  feed(1, stage_output("q", {500}, true));
  Replica& lost = replicas_->at(2, 0);
  OutputMessage partial = stage_output("q", {}, false, "", {0.9f});
  router_->on_output(lost, partial);
  EXPECT_TRUE(events_["q"].empty()) << "held until the request finished";
  take_sent();
  lost.phase = ReplicaPhase::kDown;
  std::set<std::string> held = std::exchange(lost.requests, {});
  router_->replica_lost(lost, held, "stage 2 (replica 0) failed: its process ended");
  std::vector<Sent> replay = take_sent();
  ASSERT_EQ(replay.size(), 1u);
  EXPECT_EQ(replay[0].to, "stage2.replica1");
  OutputMessage done = stage_output("q", {}, true, "", {0.5f});
  router_->on_output(replicas_->at(2, 1), done);
  ASSERT_EQ(events_["q"].size(), 2u);
  EXPECT_EQ(events_["q"][0].modality, "text");
  EXPECT_EQ(events_["q"][0].text, "Hi");
  EXPECT_EQ(events_["q"][1].audio, std::vector<float>{0.5f}) << "the lost replica's audio is dropped";
  EXPECT_TRUE(events_["q"][1].finished);
  EXPECT_EQ(events_["q"][1].completion_tokens, 1);
}

}  // namespace
}  // namespace omni::runtime
