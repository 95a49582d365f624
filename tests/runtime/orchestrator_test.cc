// Real stage processes (the omnistage_test binary's stage-worker), real sockets, real shared memory.
#include "runtime/orchestrator.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <iterator>
#include <thread>

#include "runtime/runtime_test_support.h"
#include "runtime/test_runners/test_echo_runner.h"

namespace omni::runtime {
namespace {

using namespace std::chrono_literals;
using testing::child_pids;
using testing::echo_stage;
using testing::EventLog;
using testing::eventually;
using testing::session_segments;
using testing::test_options;

GenerationRequest request(const std::string& id, std::vector<int32_t> prompt, Json sampling = Json::object()) {
  GenerationRequest r;
  r.request_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.sampling_params = std::move(sampling);
  return r;
}

std::vector<int32_t> echo_tokens(uint64_t seed, int count) {
  std::vector<int32_t> tokens;
  tokens.reserve(count);
  for (int i = 0; i < count; ++i) tokens.push_back(echo_token(seed, i));
  return tokens;
}

// What a two-stage echo pipeline answers: stage 0 echoes the prompt and emits `chunks` payloads of
// `payload_bytes`; stage 1 takes stage 0's tokens as its prompt and the payload bytes as inputs.
std::vector<int32_t> expected_two_stage(const std::vector<int32_t>& prompt, int tokens0, int tokens1,
                                        size_t payload_bytes, int chunks) {
  uint64_t seed0 = echo_seed(prompt, {});
  std::vector<int32_t> stage0 = echo_tokens(seed0, tokens0);
  std::vector<std::vector<uint8_t>> payloads;
  payloads.reserve(chunks);
  for (int c = 0; c < std::min(chunks, tokens0); ++c) payloads.push_back(echo_payload(seed0, c, payload_bytes));
  std::vector<std::span<const uint8_t>> views(payloads.begin(), payloads.end());
  return echo_tokens(echo_seed(stage0, views), tokens1);
}

std::string error_of(const std::function<void()>& f, ErrorCode* code = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "(no error)";
}

TEST(OrchestratorTest, SingleStageStreamsTokensWithUsageAndLeavesNothingBehind) {
  PipelineSpec pipeline;
  pipeline.stages = {echo_stage(0, {}, true, "text", {{"max_tokens", 3}})};
  std::string session;
  {
    Orchestrator orchestrator(pipeline, test_options());
    session = orchestrator.session();
    EXPECT_TRUE(orchestrator.healthy());
    ASSERT_EQ(orchestrator.replicas().size(), 1u);
    EXPECT_GT(orchestrator.replicas()[0].pid, 0);
    EXPECT_EQ(orchestrator.control_endpoint().rfind("ipc://@omnistage-", 0), 0u) << orchestrator.control_endpoint();

    EventLog log;
    orchestrator.submit(request("a", {11, 12, 13}), log.sink("a"));
    orchestrator.submit(request("b", {7}, {{"max_tokens", 5}}), log.sink("b"));
    ASSERT_TRUE(log.wait_finished("a"));
    ASSERT_TRUE(log.wait_finished("b"));
    EXPECT_EQ(log.tokens("a"), echo_tokens(echo_seed(std::vector<int32_t>{11, 12, 13}, {}), 3));
    EXPECT_EQ(log.tokens("b"), echo_tokens(echo_seed(std::vector<int32_t>{7}, {}), 5));
    EXPECT_EQ(log.events("a").size(), 3u) << "one event per step";
    ResponseEvent last = log.last("b");
    EXPECT_EQ(last.finish_reason, "length");
    EXPECT_EQ(last.prompt_tokens, 1);
    EXPECT_EQ(last.completion_tokens, 5);
    EXPECT_FALSE(last.error.has_value());
    EXPECT_EQ(log.events("a")[0].text, std::to_string(log.tokens("a")[0]) + " ");

    // A live id cannot be reused; a finished one can.
    EventLog log2;
    orchestrator.submit(request("a", {1}), log2.sink("a"));
    ASSERT_TRUE(log2.wait_finished("a"));
  }
  EXPECT_TRUE(child_pids().empty());
  EXPECT_TRUE(session_segments(session).empty());
}

TEST(OrchestratorTest, DuplicateLiveRequestIdIsRejectedBeforeQueueing) {
  PipelineSpec pipeline;
  pipeline.stages = {echo_stage(0, {}, true, "text", {{"max_tokens", 50}, {"step_delay_ms", 20}})};
  Orchestrator orchestrator(pipeline, test_options());
  EventLog log;
  orchestrator.submit(request("same", {1}), log.sink("same"));
  ErrorCode code{};
  EXPECT_EQ(error_of([&] { orchestrator.submit(request("same", {2}), log.sink("other")); }, &code),
            "request id 'same' is already in use");
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  GenerationRequest bad = request("img", {1});
  bad.output_modalities = {"image"};
  EXPECT_EQ(error_of([&] { orchestrator.submit(bad, log.sink("img")); }, &code),
            "modalities: this pipeline cannot produce image; it produces text");
}

struct TransportCase {
  std::string name;
  std::string endpoint;
  size_t payload_bytes;
};

class TwoStageTest : public ::testing::TestWithParam<TransportCase> {};

TEST_P(TwoStageTest, PayloadsReachTheNextStageIntact) {
  const TransportCase& c = GetParam();
  PipelineSpec pipeline;
  pipeline.stages = {echo_stage(0, {}, false, "latents", {{"payload_bytes", c.payload_bytes}, {"payload_chunks", 2}}),
                     echo_stage(1, {0}, true, "audio")};
  OrchestratorOptions options = test_options();
  options.control_endpoint = c.endpoint;
  options.shm_threshold_bytes = uint64_t{64} * 1024;
  MetricsRegistry metrics;
  options.metrics = &metrics;
  Orchestrator orchestrator(pipeline, options);
  if (!c.endpoint.empty()) {
    EXPECT_EQ(orchestrator.control_endpoint().rfind("tcp://127.0.0.1:", 0), 0u) << orchestrator.control_endpoint();
  }

  EventLog log;
  GenerationRequest r = request("r1", {3, 1, 4, 1, 5});
  // Per-stage sampling parameters: stage 0 makes 4 tokens, stage 1 (final) 6.
  r.sampling_params_list = {Json{{"max_tokens", 4}}, Json{{"max_tokens", 6}}};
  orchestrator.submit(r, log.sink("r1"));
  GenerationRequest r2 = request("r2", {9, 9}, {{"max_tokens", 2}});
  r2.sampling_params_list = {Json{{"max_tokens", 1}}};
  orchestrator.submit(r2, log.sink("r2"));
  ASSERT_TRUE(log.wait_finished("r1"));
  ASSERT_TRUE(log.wait_finished("r2"));
  ASSERT_FALSE(log.last("r1").error.has_value()) << log.last("r1").error->what();
  // Stage 1's tokens hash every payload byte, so equal tokens mean the bytes arrived unchanged.
  EXPECT_EQ(log.tokens("r1"), expected_two_stage({3, 1, 4, 1, 5}, 4, 6, c.payload_bytes, 2));
  EXPECT_EQ(log.tokens("r2"), expected_two_stage({9, 9}, 1, 2, c.payload_bytes, 2));
  EXPECT_EQ(log.last("r1").prompt_tokens, 5);
  EXPECT_EQ(log.last("r1").completion_tokens, 6);
  // Consumed segments are unlinked by their reader.
  EXPECT_TRUE(session_segments(orchestrator.session()).empty());
  // One dispatch per request, one hop per request and stage.
  std::string text = metrics.render_prometheus();
  EXPECT_NE(text.find("omnistage:orchestrator_dispatch_seconds_count 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("omnistage:stage_hop_seconds_count{stage=\"0\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("omnistage:stage_hop_seconds_count{stage=\"1\"} 2\n"), std::string::npos) << text;
}

INSTANTIATE_TEST_SUITE_P(Transports, TwoStageTest,
                         ::testing::Values(TransportCase{"IpcInline", "", 1000},
                                           TransportCase{"IpcSharedMemory", "", size_t{300} * 1024},
                                           TransportCase{"TcpInline", "tcp://127.0.0.1:*", 1000},
                                           TransportCase{"TcpSharedMemory", "tcp://127.0.0.1:*", size_t{300} * 1024}),
                         [](const auto& info) { return info.param.name; });

TEST(OrchestratorTest, TextOnlyRequestNeverRunsTheAudioStageAndTheDefaultDeliversBothOutputs) {
  PipelineSpec pipeline;
  pipeline.stages = {echo_stage(0, {}, true, "text", {{"max_tokens", 2}, {"payload_bytes", 100000}}),
                     echo_stage(1, {0}, true, "audio", {{"max_tokens", 7}})};
  Orchestrator orchestrator(pipeline, test_options());
  EventLog log;
  GenerationRequest text = request("t", {5, 6});
  text.output_modalities = {"text"};
  orchestrator.submit(text, log.sink("t"));
  ASSERT_TRUE(log.wait_finished("t"));
  EXPECT_EQ(log.tokens("t"), echo_tokens(echo_seed(std::vector<int32_t>{5, 6}, {}), 2));
  // Stage 0 wrote no payload for a stage that is not on the route.
  EXPECT_TRUE(session_segments(orchestrator.session()).empty());
  // Without modalities both outputs come: stage 0's text and stage 1's "audio"; the request
  // finishes with the last of them, and usage counts the text stage's tokens.
  orchestrator.submit(request("a", {5, 6}), log.sink("a"));
  ASSERT_TRUE(log.wait_finished("a"));
  std::vector<int32_t> text_tokens;
  std::vector<int32_t> audio_tokens;
  int finished = 0;
  int outputs_finished = 0;
  for (const ResponseEvent& event : log.events("a")) {
    ASSERT_TRUE(event.modality == "text" || event.modality == "audio") << event.modality;
    EXPECT_EQ(event.stage_id, event.modality == "text" ? 0 : 1);
    auto& tokens = event.modality == "text" ? text_tokens : audio_tokens;
    tokens.insert(tokens.end(), event.token_ids.begin(), event.token_ids.end());
    finished += event.finished;
    outputs_finished += event.output_finished;
  }
  EXPECT_EQ(text_tokens, echo_tokens(echo_seed(std::vector<int32_t>{5, 6}, {}), 2));
  EXPECT_EQ(audio_tokens, expected_two_stage({5, 6}, 2, 7, 100000, 1));
  EXPECT_EQ(finished, 1);
  EXPECT_EQ(outputs_finished, 2);
  EXPECT_EQ(log.last("a").modality, "audio") << "stage 1 finishes after its source";
  EXPECT_EQ(log.last("a").completion_tokens, 2);
}

// async_chunk: stage 1 starts on stage 0's first output and answers each output (one token and
// its payload chunk) while stage 0 still generates.
class AsyncChunkTest : public ::testing::TestWithParam<int> {};

TEST_P(AsyncChunkTest, ConsumerStartsOnTheFirstChunkAndSeesEveryChunk) {
  const int tokens0 = 12;
  PipelineSpec pipeline;
  pipeline.stages = {
      echo_stage(
          0, {}, false, "latents",
          {{"max_tokens", tokens0}, {"step_delay_ms", 40}, {"payload_bytes", 100000}, {"payload_chunks", tokens0}}),
      echo_stage(1, {0}, true, "audio", {{"stream_input", true}})};
  pipeline.stages[1].async_chunk = true;
  OrchestratorOptions options = test_options();
  options.edge_inflight_limit = GetParam();
  Orchestrator orchestrator(pipeline, options);
  EventLog log;
  std::vector<std::string> ids = {"c0", "c1"};
  for (const std::string& id : ids) orchestrator.submit(request(id, {2, 7}), log.sink(id));
  // Both stages hold a request at once: the consumer runs while the producer generates.
  EXPECT_TRUE(eventually([&] {
    auto replicas = orchestrator.replicas();
    return replicas[0].running_requests > 0 && replicas[1].running_requests > 0;
  }));
  uint64_t seed0 = echo_seed(std::vector<int32_t>{2, 7}, {});
  std::vector<int32_t> expected;
  for (int k = 0; k < tokens0; ++k) {
    std::vector<int32_t> chunk_tokens = {echo_token(seed0, k)};
    std::vector<uint8_t> payload = echo_payload(seed0, k, 100000);
    expected.push_back(echo_token(echo_seed(chunk_tokens, {payload}), k));
  }
  for (const std::string& id : ids) {
    ASSERT_TRUE(log.wait_finished(id));
    ASSERT_FALSE(log.last(id).error.has_value()) << log.last(id).error->what();
    EXPECT_EQ(log.tokens(id), expected) << id;
    EXPECT_EQ(log.last(id).finish_reason, "stop");
  }
  EXPECT_TRUE(session_segments(orchestrator.session()).empty());
}

// With an edge limit of 1 the second request's chunks wait in the head and start it later.
INSTANTIATE_TEST_SUITE_P(EdgeLimits, AsyncChunkTest, ::testing::Values(1, 64));

TEST(OrchestratorTest, AbortReachesAnAsyncChunkConsumerAndItsProducer) {
  PipelineSpec pipeline;
  pipeline.stages = {
      echo_stage(
          0, {}, false, "latents",
          {{"max_tokens", 100000}, {"step_delay_ms", 10}, {"payload_bytes", 100000}, {"payload_chunks", 100000}}),
      echo_stage(1, {0}, true, "audio", {{"stream_input", true}})};
  pipeline.stages[1].async_chunk = true;
  Orchestrator orchestrator(pipeline, test_options());
  EventLog log;
  orchestrator.submit(request("both", {1}), log.sink("both"));
  ASSERT_TRUE(log.wait_any("both"));
  ASSERT_TRUE(eventually([&] {
    auto replicas = orchestrator.replicas();
    return replicas[0].running_requests == 1 && replicas[1].running_requests == 1;
  }));
  orchestrator.abort("both");
  ASSERT_TRUE(log.wait_finished("both"));
  EXPECT_EQ(log.last("both").finish_reason, "abort");
  EXPECT_TRUE(eventually([&] {
    auto replicas = orchestrator.replicas();
    return replicas[0].running_requests == 0 && replicas[1].running_requests == 0;
  }));
  EXPECT_TRUE(eventually([&] { return session_segments(orchestrator.session()).empty(); }));
}

TEST(OrchestratorTest, EdgeInFlightLimitSerialisesTheConsumer) {
  PipelineSpec pipeline;
  pipeline.stages = {echo_stage(0, {}, false, "latents", {{"max_tokens", 1}}),
                     echo_stage(1, {0}, true, "text", {{"max_tokens", 3}, {"step_delay_ms", 10}})};
  OrchestratorOptions options = test_options();
  options.edge_inflight_limit = 1;
  Orchestrator orchestrator(pipeline, options);
  EventLog log;
  std::vector<std::string> ids = {"q0", "q1", "q2", "q3"};
  for (const std::string& id : ids) orchestrator.submit(request(id, {1, 2}), log.sink(id));
  for (const std::string& id : ids) ASSERT_TRUE(log.wait_finished(id));
  // With one request at a time across the edge, each request's events are contiguous.
  std::vector<std::string> order = log.order();
  ASSERT_EQ(order.size(), 12u);
  for (size_t i = 0; i < order.size(); i += 3) {
    EXPECT_EQ(order[i], order[i + 1]);
    EXPECT_EQ(order[i], order[i + 2]);
  }
  for (const std::string& id : ids) EXPECT_EQ(log.tokens(id), log.tokens("q0"));
}

TEST(OrchestratorTest, RequestErrorFromAStageFailsOnlyThatRequest) {
  PipelineSpec pipeline;
  pipeline.stages = {echo_stage(0, {}, true, "text")};
  Orchestrator orchestrator(pipeline, test_options());
  EventLog log;
  orchestrator.submit(request("bad", {1}, {{"max_tokens", 0}}), log.sink("bad"));
  ASSERT_TRUE(log.wait_finished("bad"));
  ResponseEvent last = log.last("bad");
  ASSERT_TRUE(last.error.has_value());
  EXPECT_EQ(last.error->code(), ErrorCode::kInvalidArgument);
  EXPECT_STREQ(last.error->what(), "stage 0: sampling_params.max_tokens must be a positive integer, not 0");
  EXPECT_TRUE(orchestrator.healthy());
  orchestrator.submit(request("good", {1}), log.sink("good"));
  ASSERT_TRUE(log.wait_finished("good"));
  EXPECT_FALSE(log.last("good").error.has_value());
}

TEST(OrchestratorTest, StageInitErrorStopsTheHeadWithTheStagesMessageAndCode) {
  PipelineSpec pipeline;
  pipeline.stages = {
      echo_stage(0, {}, false, "latents"),
      echo_stage(1, {0}, true, "audio",
                 {{"fail_init", "cannot open /models/code2wav.safetensors"}, {"fail_init_code", "not_found"}})};
  ErrorCode code{};
  std::string message = error_of([&] { Orchestrator orchestrator(pipeline, test_options()); }, &code);
  EXPECT_EQ(code, ErrorCode::kNotFound);
  EXPECT_EQ(message,
            "stage 1 (replica 0) failed to start: cannot open /models/code2wav.safetensors (the stage process exited "
            "with code 66)");
  EXPECT_TRUE(child_pids().empty()) << "a stage process was left behind";
}

TEST(OrchestratorTest, UnknownRunnerKindIsAConfigErrorFromTheStage) {
  PipelineSpec pipeline;
  pipeline.stages = {echo_stage(0, {}, true, "text")};
  pipeline.stages[0].engine_args["runner"] = "warp-drive";
  ErrorCode code{};
  std::string message = error_of([&] { Orchestrator orchestrator(pipeline, test_options()); }, &code);
  EXPECT_EQ(code, ErrorCode::kInvalidConfig);
  EXPECT_NE(message.find("stage 0: unknown runner kind 'warp-drive'; the known kinds are ar, diffusion, generation, "
                         "test-echo, test-tone"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("exited with code 78"), std::string::npos) << message;
  EXPECT_TRUE(child_pids().empty());
}

TEST(OrchestratorTest, StageInitTimeoutKillsEveryStage) {
  PipelineSpec pipeline;
  pipeline.stages = {echo_stage(0, {}, false, "latents"),
                     echo_stage(1, {0}, true, "audio", {{"init_delay_ms", 60000}})};
  OrchestratorOptions options = test_options();
  // Long enough for stage 0 to be ready on a loaded machine (3 s was not, with 8 compile jobs
  // on 2 cores); stage 1 waits 60 s before it says it is ready.
  options.stage_init_timeout = 8s;
  ErrorCode code{};
  auto start = std::chrono::steady_clock::now();
  std::string message = error_of([&] { Orchestrator orchestrator(pipeline, options); }, &code);
  EXPECT_EQ(code, ErrorCode::kTimeout);
  EXPECT_EQ(message, "stage 1 (replica 0) was not ready within --stage-init-timeout=8s");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);
  EXPECT_TRUE(child_pids().empty());
}

TEST(OrchestratorTest, OverallInitTimeout) {
  PipelineSpec pipeline;
  pipeline.stages = {echo_stage(0, {}, true, "text", {{"init_delay_ms", 60000}})};
  OrchestratorOptions options = test_options();
  options.init_timeout = 400ms;
  ErrorCode code{};
  std::string message = error_of([&] { Orchestrator orchestrator(pipeline, options); }, &code);
  EXPECT_EQ(code, ErrorCode::kTimeout);
  EXPECT_EQ(message, "the stages were not all ready within --init-timeout=0.4s");
  EXPECT_TRUE(child_pids().empty());
}

TEST(OrchestratorTest, AMissingWorkerProgramIsReported) {
  PipelineSpec pipeline;
  pipeline.stages = {echo_stage(0, {}, true, "text")};
  OrchestratorOptions options = test_options();
  options.worker_program = "/nonexistent/omnistage";
  ErrorCode code{};
  EXPECT_EQ(error_of([&] { Orchestrator orchestrator(pipeline, options); }, &code),
            "cannot start /nonexistent/omnistage: No such file or directory");
  EXPECT_EQ(code, ErrorCode::kUnavailable);
  EXPECT_TRUE(child_pids().empty());
}

TEST(OrchestratorTest, AbortWhileInTheProducerUnlinksItsSegments) {
  PipelineSpec pipeline;
  pipeline.stages = {
      echo_stage(0, {}, false, "latents",
                 {{"max_tokens", 100000}, {"step_delay_ms", 10}, {"payload_bytes", 100000}, {"payload_chunks", 3}}),
      echo_stage(1, {0}, true, "audio")};
  Orchestrator orchestrator(pipeline, test_options());
  EventLog log;
  orchestrator.submit(request("long", {1, 2, 3}), log.sink("long"));
  // Stage 0 wrote its three chunks into shared memory; stage 1 has not started (full payload mode).
  ASSERT_TRUE(eventually([&] { return session_segments(orchestrator.session()).size() == 3; }));
  orchestrator.abort("long");
  ASSERT_TRUE(log.wait_finished("long"));
  EXPECT_EQ(log.last("long").finish_reason, "abort");
  EXPECT_FALSE(log.last("long").error.has_value());
  EXPECT_TRUE(eventually([&] { return session_segments(orchestrator.session()).empty(); }))
      << session_segments(orchestrator.session()).size() << " segments left";
  // The producer dropped the request (its heartbeat reports nothing running).
  EXPECT_TRUE(eventually([&] {
    auto replicas = orchestrator.replicas();
    return replicas[0].running_requests == 0 && replicas[1].running_requests == 0;
  }));
  orchestrator.abort("long");  // unknown by now: ignored
  orchestrator.abort("never-existed");
  EXPECT_TRUE(orchestrator.healthy());
}

TEST(OrchestratorTest, AbortWhileInTheConsumerReachesIt) {
  PipelineSpec pipeline;
  pipeline.stages = {echo_stage(0, {}, false, "latents", {{"max_tokens", 1}, {"payload_bytes", 100000}}),
                     echo_stage(1, {0}, true, "audio", {{"max_tokens", 100000}, {"step_delay_ms", 10}})};
  Orchestrator orchestrator(pipeline, test_options());
  EventLog log;
  orchestrator.submit(request("long", {4}), log.sink("long"));
  ASSERT_TRUE(log.wait_any("long"));
  ASSERT_TRUE(eventually([&] { return orchestrator.replicas()[1].running_requests == 1; }));
  orchestrator.abort("long");
  ASSERT_TRUE(log.wait_finished("long"));
  EXPECT_EQ(log.last("long").finish_reason, "abort");
  EXPECT_TRUE(eventually([&] { return orchestrator.replicas()[1].running_requests == 0; }));
  EXPECT_TRUE(session_segments(orchestrator.session()).empty());
}

TEST(OrchestratorTest, StageKilledMidRequestFailsItNamingTheStage) {
  PipelineSpec pipeline;
  pipeline.stages = {echo_stage(0, {}, false, "latents", {{"max_tokens", 1}}),
                     echo_stage(1, {0}, true, "audio", {{"max_tokens", 100000}, {"step_delay_ms", 10}})};
  Orchestrator orchestrator(pipeline, test_options());
  EventLog log;
  orchestrator.submit(request("victim", {8}), log.sink("victim"));
  ASSERT_TRUE(log.wait_any("victim"));
  pid_t stage1 = orchestrator.replicas()[1].pid;
  ASSERT_EQ(kill(stage1, SIGKILL), 0);
  ASSERT_TRUE(log.wait_finished("victim"));
  ResponseEvent last = log.last("victim");
  ASSERT_TRUE(last.error.has_value());
  EXPECT_EQ(last.error->code(), ErrorCode::kUnavailable);
  EXPECT_EQ(std::string(last.error->what()),
            "stage 1 (replica 0) failed: its process was killed by signal 9 (SIGKILL)");
  EXPECT_FALSE(orchestrator.healthy());
  EXPECT_TRUE(orchestrator.replicas()[1].failed);
  ErrorCode code{};
  EXPECT_EQ(error_of([&] { orchestrator.submit(request("after", {1}), log.sink("after")); }, &code),
            "stage 1 (replica 0) failed: its process was killed by signal 9 (SIGKILL)");
  EXPECT_EQ(code, ErrorCode::kUnavailable);
  orchestrator.shutdown();
  EXPECT_TRUE(child_pids().empty());
}

TEST(OrchestratorTest, StageThatExitsMidRequestFailsItWithTheExitCode) {
  PipelineSpec pipeline;
  pipeline.stages = {
      echo_stage(0, {}, true, "text",
                 {{"max_tokens", 10}, {"step_delay_ms", 20}, {"crash_on_prompt_token", 666}, {"crash_exit_code", 3}})};
  Orchestrator orchestrator(pipeline, test_options());
  EventLog log;
  orchestrator.submit(request("crash", {1, 666}), log.sink("crash"));
  ASSERT_TRUE(log.wait_finished("crash"));
  ASSERT_TRUE(log.last("crash").error.has_value());
  EXPECT_STREQ(log.last("crash").error->what(), "stage 0 (replica 0) failed: its process exited with code 3");
  // The step delay gave the first output time to leave; what a dying process has not sent is lost.
  EXPECT_EQ(log.tokens("crash").size(), 1u) << "the first token was streamed before the crash";
  EXPECT_FALSE(orchestrator.healthy());
}

TEST(OrchestratorTest, AStageThatStopsAnsweringFailsAfterTheHeartbeatTimeout) {
  PipelineSpec pipeline;
  pipeline.stages = {echo_stage(0, {}, true, "text", {{"max_tokens", 100000}, {"step_delay_ms", 10}})};
  OrchestratorOptions options = test_options();
  options.heartbeat_timeout = 500ms;
  Orchestrator orchestrator(pipeline, options);
  EventLog log;
  orchestrator.submit(request("hung", {1}), log.sink("hung"));
  ASSERT_TRUE(log.wait_any("hung"));
  ASSERT_EQ(kill(orchestrator.replicas()[0].pid, SIGSTOP), 0);  // alive, but silent
  ASSERT_TRUE(log.wait_finished("hung"));
  ASSERT_TRUE(log.last("hung").error.has_value());
  EXPECT_STREQ(log.last("hung").error->what(), "stage 0 (replica 0) failed: it sent no heartbeat for 0.5s");
  EXPECT_FALSE(orchestrator.healthy());
  orchestrator.shutdown();
  EXPECT_TRUE(child_pids().empty()) << "the silent stage was not killed";
}

TEST(OrchestratorTest, ShutdownEndsLiveRequestsStopsStagesAndCleansSharedMemory) {
  PipelineSpec pipeline;
  pipeline.stages = {
      echo_stage(0, {}, false, "latents",
                 {{"max_tokens", 100000}, {"step_delay_ms", 10}, {"payload_bytes", 100000}, {"payload_chunks", 2}}),
      echo_stage(1, {0}, true, "audio")};
  Orchestrator orchestrator(pipeline, test_options());
  EventLog log;
  orchestrator.submit(request("inflight", {1}), log.sink("inflight"));
  ASSERT_TRUE(eventually([&] { return session_segments(orchestrator.session()).size() == 2; }));
  auto start = std::chrono::steady_clock::now();
  orchestrator.shutdown();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s) << "stages should exit on Shutdown, not by the grace kill";
  ASSERT_TRUE(log.wait_finished("inflight", 0ms));
  ASSERT_TRUE(log.last("inflight").error.has_value());
  EXPECT_STREQ(log.last("inflight").error->what(), "the server is shutting down");
  EXPECT_TRUE(child_pids().empty());
  EXPECT_TRUE(session_segments(orchestrator.session()).empty());
  EXPECT_FALSE(orchestrator.healthy());
  ErrorCode code{};
  EXPECT_EQ(error_of([&] { orchestrator.submit(request("late", {1}), log.sink("late")); }, &code),
            "the server is shutting down");
  orchestrator.shutdown();  // idempotent
}

TEST(OrchestratorTest, ReplicasGetTheirSliceOfTheStagesDevices) {
  PipelineSpec pipeline;
  pipeline.stages = {echo_stage(0, {}, true, "text", {{"max_tokens", 1}})};
  pipeline.stages[0].devices = "0,1";
  pipeline.stages[0].num_replicas = 2;
  setenv("CUDA_VISIBLE_DEVICES", "5,6", 1);
  Orchestrator orchestrator(pipeline, test_options());
  unsetenv("CUDA_VISIBLE_DEVICES");
  auto replicas = orchestrator.replicas();
  ASSERT_EQ(replicas.size(), 2u);
  auto environment_of = [](pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/environ");
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t at = all.find("CUDA_VISIBLE_DEVICES=");
    return at == std::string::npos ? std::string("(unset)") : std::string(all.c_str() + at);
  };
  EXPECT_EQ(environment_of(replicas[0].pid), "CUDA_VISIBLE_DEVICES=5");
  EXPECT_EQ(environment_of(replicas[1].pid), "CUDA_VISIBLE_DEVICES=6");
  // Both replicas serve: requests spread over them and all finish.
  EventLog log;
  for (int i = 0; i < 6; ++i)
    orchestrator.submit(request("r" + std::to_string(i), {i}), log.sink("r" + std::to_string(i)));
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(log.wait_finished("r" + std::to_string(i)));
    EXPECT_EQ(log.tokens("r" + std::to_string(i)), echo_tokens(echo_seed(std::vector<int32_t>{i}, {}), 1));
  }
}

}  // namespace
}  // namespace omni::runtime
