// The ZeroMQ transport of the control protocol (stage_protocol.h). The head binds one ROUTER
// socket; every stage replica connects one DEALER socket whose routing id names the replica.
// Endpoints are ipc:// locally (ipc://@name is an abstract socket: nothing on disk) and tcp://
// across hosts; the bytes on the wire are the same.
//
// Threads: each object is used by one thread at a time (ZeroMQ sockets are not thread-safe).
// Sends never block: the high-water marks are off, so a slow peer queues messages in memory;
// the orchestrator's per-edge in-flight limit bounds how many there can be.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "runtime/stage_protocol.h"

namespace omni::runtime {

// The routing id a replica's DEALER uses: "stage<id>.replica<r>".
std::string replica_identity(int stage_id, int replica);

// Head side.
class ControlServer {
 public:
  // Binds `endpoint`; "tcp://HOST:*" picks a free port. Throws omni::Error(kUnavailable) naming
  // the endpoint when it cannot bind.
  explicit ControlServer(const std::string& endpoint);

  // The bound endpoint with the chosen port filled in.
  const std::string& endpoint() const { return endpoint_; }

  // Returns once a message is waiting, `wake_fd` (if >= 0) is readable, or `timeout` passed.
  void wait(std::chrono::milliseconds timeout, int wake_fd);

  struct Received {
    std::string peer;  // the sender's routing id
    StageMessage message;
  };
  // The next waiting message, or nullopt. A malformed message or one of another protocol
  // version is logged with its sender and skipped.
  std::optional<Received> receive();

  // Queues `message` for `peer`; false when no connected peer has that routing id.
  bool send(const std::string& peer, const StageMessage& message);

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
  std::string endpoint_;
};

// Worker side.
class ControlClient {
 public:
  // Connects to the head at `endpoint` as `identity`. Connecting never waits for the head;
  // messages queue until it is reachable.
  ControlClient(const std::string& endpoint, const std::string& identity);
  // Waits up to the linger time (2 s) for queued messages to leave, so a final InitFailed or
  // Output reaches the head before the process exits.
  ~ControlClient();

  void send(const StageMessage& message);
  void wait(std::chrono::milliseconds timeout, int wake_fd);
  // Closes without waiting for queued messages: they were for a peer that is gone.
  void drop_unsent();
  // Non-blocking; malformed messages are logged and skipped like on the server.
  std::optional<StageMessage> receive();

 private:
  friend void wait_any(const std::vector<ControlClient*>& clients, std::chrono::milliseconds timeout, int wake_fd);

  zmq::context_t context_;
  zmq::socket_t socket_;
  std::string endpoint_;
};

// Returns once a message is waiting on any of `clients`, `wake_fd` (if >= 0) is readable, or
// `timeout` passed.
void wait_any(const std::vector<ControlClient*>& clients, std::chrono::milliseconds timeout, int wake_fd);

}  // namespace omni::runtime
