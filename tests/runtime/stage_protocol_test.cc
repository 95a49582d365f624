#include "runtime/stage_protocol.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>

namespace omni::runtime {
namespace {

template <typename T>
T round_trip(const StageMessage& message) {
  StageMessage decoded = decode_message(encode_message(message), "test peer");
  EXPECT_TRUE(std::holds_alternative<T>(decoded)) << message_type_name(decoded);
  return std::get<T>(decoded);
}

TEST(StageProtocolTest, SubmitKeepsTokensSamplingAndPayloadReferences) {
  PayloadRef shm{"SharedMemoryConnector", {"req-1", 0, 1, 2}, 100000, "/omnistage_s_req-1_0_2@1", {}};
  PayloadRef inline_ref{"SharedMemoryConnector", {"req-1", 0, 1, 3}, 3, "", {7, 0, 255}};
  SubmitMessage submit{
      "req-1", {1, -2, 151643}, Json{{"temperature", 0.5}, {"max_tokens", 9}}, {shm, inline_ref}, {2, 3}};
  auto decoded = round_trip<SubmitMessage>(submit);
  EXPECT_EQ(decoded.request_id, "req-1");
  EXPECT_EQ(decoded.prompt_token_ids, (std::vector<int32_t>{1, -2, 151643}));
  EXPECT_EQ(decoded.sampling_params, submit.sampling_params);
  EXPECT_EQ(decoded.output_stages, (std::vector<int>{2, 3}));
  ASSERT_EQ(decoded.inputs.size(), 2u);
  EXPECT_EQ(decoded.inputs[0].location, shm.location);
  EXPECT_EQ(decoded.inputs[0].size, 100000u);
  EXPECT_FALSE(decoded.inputs[0].is_inline());
  EXPECT_EQ(decoded.inputs[0].address.key(), "req-1_0_2");
  EXPECT_EQ(decoded.inputs[1].address.to_stage, 1);
  EXPECT_TRUE(decoded.inputs[1].is_inline());
  EXPECT_EQ(decoded.inputs[1].inline_bytes, (std::vector<uint8_t>{7, 0, 255}));
}

TEST(StageProtocolTest, FrontendResetSleepWakeUpAndTheirAnswers) {
  EXPECT_EQ(round_trip<FrontendResetMessage>(FrontendResetMessage{3}).frontend, 3);
  EXPECT_EQ(round_trip<SleepMessage>(SleepMessage{2}).level, 2);
  EXPECT_TRUE(std::holds_alternative<WakeUpMessage>(decode_message(encode_message(WakeUpMessage{}), "test")));

  StageControlAck ack{1, 2, "sleep", 1, 5000, 3000, 0.25, {}, {}};
  StageControlAck done = round_trip<StageControlAck>(ack);
  EXPECT_EQ(done.stage_id, 1);
  EXPECT_EQ(done.replica, 2);
  EXPECT_EQ(done.operation, "sleep");
  EXPECT_EQ(done.level, 1);
  EXPECT_EQ(done.rss_before_bytes, 5000);
  EXPECT_EQ(done.rss_after_bytes, 3000);
  EXPECT_DOUBLE_EQ(done.seconds, 0.25);
  EXPECT_FALSE(done.error.has_value());

  ack.error = ErrorCode::kUnsupported;
  ack.message = "stage 1 replica 2: cannot sleep at level 1";
  StageControlAck failed = round_trip<StageControlAck>(ack);
  ASSERT_TRUE(failed.error.has_value());
  EXPECT_EQ(*failed.error, ErrorCode::kUnsupported);
  EXPECT_EQ(failed.message, ack.message);
}

TEST(StageProtocolTest, InputChunkAndOpenInputSubmit) {
  PayloadRef ref{"SharedMemoryConnector", {"r", 0, 1, 4}, 70000, "/omnistage_s_r_0_4@1", {}};
  auto chunk = round_trip<InputChunkMessage>(InputChunkMessage{"r", {42}, {ref}, true});
  EXPECT_EQ(chunk.request_id, "r");
  EXPECT_EQ(chunk.token_ids, std::vector<int32_t>{42});
  ASSERT_EQ(chunk.payloads.size(), 1u);
  EXPECT_EQ(chunk.payloads[0].address.chunk, 4);
  EXPECT_TRUE(chunk.last);
  EXPECT_FALSE(round_trip<InputChunkMessage>(InputChunkMessage{"r", {}, {}, false}).last);
  SubmitMessage open{"r", {1}, Json::object(), {}, {}, true};
  EXPECT_TRUE(round_trip<SubmitMessage>(open).input_open);
  open.input_open = false;
  EXPECT_FALSE(round_trip<SubmitMessage>(open).input_open);
}

TEST(StageProtocolTest, OutputWithAndWithoutFinishReason) {
  auto last = round_trip<OutputMessage>(OutputMessage{"r", {5, 6}, "five six", "stop", {}});
  EXPECT_EQ(last.token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(last.text, "five six");
  EXPECT_EQ(last.finish_reason, "stop");
  EXPECT_FALSE(last.stage_seconds.has_value());
  auto delta = round_trip<OutputMessage>(OutputMessage{.request_id = "r", .token_ids = {7}, .stage_seconds = 0.125});
  EXPECT_FALSE(delta.finish_reason.has_value());
  EXPECT_EQ(delta.stage_seconds, 0.125);
  EXPECT_TRUE(delta.logprobs.empty());
  EXPECT_TRUE(delta.audio.empty());
  EXPECT_EQ(delta.audio_sample_rate, 0);
}

TEST(StageProtocolTest, OutputAudioKeepsEverySampleBitForBit) {
  std::vector<float> audio = {0.0f, -1.0f, 1.0f, 0.123456789f, -0.0f, 1e-30f};
  auto decoded = round_trip<OutputMessage>(OutputMessage{"r", {}, "", "stop", {}, audio, 24000});
  ASSERT_EQ(decoded.audio.size(), audio.size());
  for (size_t i = 0; i < audio.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(decoded.audio[i]), std::bit_cast<uint32_t>(audio[i])) << i;
  }
  EXPECT_EQ(decoded.audio_sample_rate, 24000);
}

TEST(StageProtocolTest, SubmitCarriesAdditionalInformation) {
  Json info = {{"text", "Hello"}, {"speaker", "Vivian"}, {"language", "Auto"}};
  SubmitMessage submit{"r", {}, Json::object(), {}, {}, false, info};
  EXPECT_EQ(round_trip<SubmitMessage>(submit).additional_information, info);
}

TEST(StageProtocolTest, OutputCarriesTokenLogprobsAndItsChoice) {
  OutputMessage message{.request_id = "r", .token_ids = {7, 9}, .text = "ab", .index = 2, .more_choices = true};
  message.logprobs = {{{7, -0.25f}, 1, {{7, -0.25f}, {3, -1.5f}}}, {{9, -2.75f}, 3, {}}};
  auto decoded = round_trip<OutputMessage>(message);
  ASSERT_EQ(decoded.logprobs.size(), 2u);
  EXPECT_EQ(decoded.logprobs[0].token.token_id, 7);
  EXPECT_EQ(decoded.logprobs[0].token.logprob, -0.25f);
  EXPECT_EQ(decoded.logprobs[0].rank, 1);
  ASSERT_EQ(decoded.logprobs[0].top.size(), 2u);
  EXPECT_EQ(decoded.logprobs[0].top[1].token_id, 3);
  EXPECT_EQ(decoded.logprobs[0].top[1].logprob, -1.5f);
  EXPECT_EQ(decoded.logprobs[1].token.logprob, -2.75f);
  EXPECT_EQ(decoded.logprobs[1].rank, 3);
  EXPECT_TRUE(decoded.logprobs[1].top.empty());
  EXPECT_EQ(decoded.index, 2);
  EXPECT_TRUE(decoded.more_choices);
  EXPECT_FALSE(round_trip<OutputMessage>(OutputMessage{.request_id = "r"}).more_choices);
}

TEST(StageProtocolTest, HandshakeAndErrorMessagesKeepTheirFields) {
  auto reg = round_trip<RegisterMessage>(RegisterMessage{2, 1, 4242, "node-a", "3,4"});
  EXPECT_EQ(reg.stage_id, 2);
  EXPECT_EQ(reg.replica, 1);
  EXPECT_EQ(reg.pid, 4242);
  EXPECT_EQ(reg.host, "node-a");
  EXPECT_EQ(reg.devices, "3,4");
  auto failed = round_trip<InitFailedMessage>(
      InitFailedMessage{1, 0, ErrorCode::kLoadFailed, "model.safetensors: truncated", 65});
  EXPECT_EQ(failed.code, ErrorCode::kLoadFailed);
  EXPECT_EQ(failed.message, "model.safetensors: truncated");
  EXPECT_EQ(failed.exit_code, 65);
  auto error = round_trip<ErrorMessage>(ErrorMessage{"", ErrorCode::kInternal, "CUDA out of memory", true});
  EXPECT_TRUE(error.fatal);
  EXPECT_EQ(error.code, ErrorCode::kInternal);
  EXPECT_EQ(round_trip<AbortMessage>(AbortMessage{"r9"}).request_id, "r9");
  EXPECT_EQ(round_trip<HeartbeatMessage>(HeartbeatMessage{0, 0, 17, {}}).running_requests, 17);
  auto timed = round_trip<HeartbeatMessage>(HeartbeatMessage{1, 0, 2, {{"step", 0.25}, {"talker", 0.125}}});
  ASSERT_EQ(timed.step_timings.size(), 2u);
  EXPECT_EQ(timed.step_timings[0].part, "step");
  EXPECT_EQ(timed.step_timings[0].seconds, 0.25);
  EXPECT_EQ(timed.step_timings[1].part, "talker");
  EXPECT_EQ(timed.step_timings[1].seconds, 0.125);
  round_trip<ShutdownMessage>(ShutdownMessage{});
  round_trip<ReadyMessage>(ReadyMessage{3, 0});
}

TEST(StageProtocolTest, AnotherProtocolVersionIsRefusedNamingBoth) {
  Json message = {{"v", kProtocolVersion + 1}, {"type", "abort"}, {"request_id", "x"}};
  std::string bytes;
  Json::to_msgpack(message, bytes);
  try {
    decode_message(bytes, "stage1.replica0");
    FAIL() << "a different version was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  fmt::format("stage1.replica0 speaks control protocol version {}, this process speaks "
                              "version {}",
                              kProtocolVersion + 1, kProtocolVersion)),
              std::string::npos)
        << e.what();
  }
}

// Found by the stage_protocol fuzzer: a version or type that is a string of invalid UTF-8 threw
// nlohmann's type_error while the error message was written.
TEST(StageProtocolTest, AVersionOfInvalidUtf8IsAnErrorNamingThePeer) {
  for (const char* field : {"v", "type"}) {
    Json message = {{"v", kProtocolVersion}, {"type", "abort"}, {"request_id", "x"}};
    message[field] = Json::array({std::string("\xbc\xbc")});
    std::string bytes;
    Json::to_msgpack(message, bytes);
    try {
      decode_message(bytes, "stage1.replica0");
      FAIL() << field << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("stage1.replica0"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("[\"\xef\xbf\xbd\xef\xbf\xbd\"]"), std::string::npos) << e.what();
    }
  }
}

TEST(StageProtocolTest, GarbageAndMissingFieldsAreErrorsNamingThePeer) {
  EXPECT_THROW(decode_message("\xc1 not msgpack", "peer-x"), Error);
  Json message = {{"v", kProtocolVersion}, {"type", "submit"}, {"request_id", "x"}};
  std::string bytes;
  Json::to_msgpack(message, bytes);
  try {
    decode_message(bytes, "peer-y");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'submit' message from peer-y is malformed"), std::string::npos) << e.what();
  }
  Json unknown = {{"v", kProtocolVersion}, {"type", "teleport"}};
  bytes.clear();
  Json::to_msgpack(unknown, bytes);
  EXPECT_THROW(decode_message(bytes, "peer-z"), Error);
}

TEST(StageProtocolTest, ErrorCodeNamesRoundTrip) {
  for (ErrorCode code : {ErrorCode::kInvalidArgument, ErrorCode::kLoadFailed, ErrorCode::kUnavailable,
                         ErrorCode::kTimeout, ErrorCode::kInternal}) {
    EXPECT_EQ(error_code_from_name(error_code_name(code)), code);
  }
  EXPECT_EQ(error_code_from_name("no_such_code"), ErrorCode::kInternal);
}

}  // namespace
}  // namespace omni::runtime

namespace omni::runtime {
namespace {

TEST(StageProtocolTest, JoinRegistrationItsReplyRejoinAndLeave) {
  RegisterMessage join{1, -1, 77, "host-b", "0"};
  join.address = "10.0.0.2";
  join.pipeline = Json{{"stages", Json::array({{{"stage_id", 0}}})}};
  auto decoded = round_trip<RegisterMessage>(join);
  EXPECT_EQ(decoded.replica, -1);
  EXPECT_EQ(decoded.address, "10.0.0.2");
  EXPECT_EQ(decoded.pipeline, join.pipeline);
  EXPECT_TRUE(round_trip<RegisterMessage>(RegisterMessage{1, 0, 77, "h", ""}).pipeline.is_null())
      << "a head's own replica sends no pipeline";

  auto accepted = round_trip<JoinReplyMessage>(JoinReplyMessage{true, 3, "s1", true, true, ""});
  EXPECT_TRUE(accepted.accepted);
  EXPECT_EQ(accepted.replica, 3);
  EXPECT_EQ(accepted.session, "s1");
  EXPECT_TRUE(accepted.inline_payloads);
  EXPECT_TRUE(accepted.retain_inputs);
  auto refused = round_trip<JoinReplyMessage>(JoinReplyMessage{false, 0, "", false, false, "differs at x"});
  EXPECT_FALSE(refused.accepted);
  EXPECT_EQ(refused.message, "differs at x");
  round_trip<RejoinMessage>(RejoinMessage{});
  EXPECT_EQ(round_trip<LeaveMessage>(LeaveMessage{2, 5}).replica, 5);
}

}  // namespace
}  // namespace omni::runtime
