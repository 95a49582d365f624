#include "runtime/control_channel.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

namespace omni::runtime {
namespace {

// The same conversation over each transport: a replica registers, the head submits, the replica
// answers with an output carrying an inline payload.
void converse(const std::string& bind_endpoint) {
  ControlServer server(bind_endpoint);
  std::string endpoint = server.endpoint();
  EXPECT_EQ(endpoint.find('*'), std::string::npos) << endpoint;

  std::thread replica([endpoint] {
    ControlClient client(endpoint, replica_identity(1, 0));
    client.send(RegisterMessage{1, 0, getpid(), "host", ""});
    std::optional<StageMessage> message;
    for (int i = 0; i < 500 && !message; ++i) {
      client.wait(std::chrono::milliseconds(10), -1);
      message = client.receive();
    }
    ASSERT_TRUE(message && std::holds_alternative<SubmitMessage>(*message));
    const auto& submit = std::get<SubmitMessage>(*message);
    PayloadRef payload{"SharedMemoryConnector", {submit.request_id, 1, 2, 0}, 2, "", {0xab, 0xcd}};
    client.send(OutputMessage{submit.request_id, submit.prompt_token_ids, "echo", "stop", {payload}});
  });

  auto receive = [&]() {
    for (int i = 0; i < 500; ++i) {
      server.wait(std::chrono::milliseconds(10), -1);
      if (auto received = server.receive()) return *received;
    }
    ADD_FAILURE() << "nothing received on " << endpoint;
    return ControlServer::Received{};
  };
  auto hello = receive();
  EXPECT_EQ(hello.peer, "stage1.replica0");
  ASSERT_TRUE(std::holds_alternative<RegisterMessage>(hello.message));
  EXPECT_TRUE(server.send(hello.peer, SubmitMessage{"r1", {4, 5, 6}, Json::object(), {}, {2}}));
  auto answer = receive();
  replica.join();
  ASSERT_TRUE(std::holds_alternative<OutputMessage>(answer.message));
  const auto& output = std::get<OutputMessage>(answer.message);
  EXPECT_EQ(output.request_id, "r1");
  EXPECT_EQ(output.token_ids, (std::vector<int32_t>{4, 5, 6}));
  ASSERT_EQ(output.payloads.size(), 1u);
  EXPECT_EQ(output.payloads[0].inline_bytes, (std::vector<uint8_t>{0xab, 0xcd}));
  EXPECT_FALSE(server.send("stage9.replica9", AbortMessage{"r1"})) << "an unknown peer must be reported";
}

TEST(ControlChannelTest, IpcAbstractSocket) { converse("ipc://@omnistage-test-" + std::to_string(getpid())); }

TEST(ControlChannelTest, TcpWithAnEphemeralPort) { converse("tcp://127.0.0.1:*"); }

TEST(ControlChannelTest, BindFailureNamesTheEndpoint) {
  ControlServer first("tcp://127.0.0.1:*");
  try {
    ControlServer second(first.endpoint());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find(first.endpoint()), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace omni::runtime
