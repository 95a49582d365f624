#include "runtime/control_channel.h"

#include <spdlog/spdlog.h>

#include "base/error.h"

namespace omni::runtime {

namespace {

constexpr int kClientLingerMs = 2000;

void wait_on(zmq::socket_t& socket, std::chrono::milliseconds timeout, int wake_fd) {
  zmq::pollitem_t items[2] = {{socket.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, wake_fd, ZMQ_POLLIN, 0}};
  try {
    zmq::poll(items, wake_fd >= 0 ? 2 : 1, timeout);
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw;  // a signal handler ran; the caller's loop looks again
  }
}

}  // namespace

std::string replica_identity(int stage_id, int replica) {
  return "stage" + std::to_string(stage_id) + ".replica" + std::to_string(replica);
}

ControlServer::ControlServer(const std::string& endpoint) : socket_(context_, zmq::socket_type::router) {
  socket_.set(zmq::sockopt::router_mandatory, 1);
  // A replica that reconnects under its routing id (a reset channel) replaces its old connection.
  socket_.set(zmq::sockopt::router_handover, 1);
  socket_.set(zmq::sockopt::sndhwm, 0);
  socket_.set(zmq::sockopt::rcvhwm, 0);
  socket_.set(zmq::sockopt::linger, 0);
  try {
    socket_.bind(endpoint);
  } catch (const zmq::error_t& e) {
    throw_error(ErrorCode::kUnavailable, "cannot bind the stage control endpoint {}: {}", endpoint, e.what());
  }
  endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
}

void ControlServer::wait(std::chrono::milliseconds timeout, int wake_fd) { wait_on(socket_, timeout, wake_fd); }

std::optional<ControlServer::Received> ControlServer::receive() {
  while (true) {
    zmq::message_t identity;
    if (!socket_.recv(identity, zmq::recv_flags::dontwait)) return std::nullopt;
    std::string peer = identity.to_string();
    zmq::message_t body;
    if (!identity.more() || !socket_.recv(body, zmq::recv_flags::none)) {
      spdlog::warn("control message from {} has no body; skipped", peer);
      continue;
    }
    while (body.more()) {  // a protocol message is one frame; drop extra frames of a foreign sender
      zmq::message_t extra;
      if (!socket_.recv(extra, zmq::recv_flags::none)) break;
    }
    try {
      return Received{peer, decode_message(body.to_string_view(), peer)};
    } catch (const Error& e) {
      spdlog::warn("{}; skipped", e.what());
    }
  }
}

bool ControlServer::send(const std::string& peer, const StageMessage& message) {
  std::string bytes = encode_message(message);
  try {
    socket_.send(zmq::buffer(peer), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    socket_.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
    return true;
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) return false;
    throw_error(ErrorCode::kInternal, "cannot send '{}' to {}: {}", message_type_name(message), peer, e.what());
  }
}

ControlClient::ControlClient(const std::string& endpoint, const std::string& identity)
    : socket_(context_, zmq::socket_type::dealer), endpoint_(endpoint) {
  socket_.set(zmq::sockopt::routing_id, identity);
  socket_.set(zmq::sockopt::sndhwm, 0);
  socket_.set(zmq::sockopt::rcvhwm, 0);
  socket_.set(zmq::sockopt::linger, kClientLingerMs);
  try {
    socket_.connect(endpoint);
  } catch (const zmq::error_t& e) {
    throw_error(ErrorCode::kInvalidArgument, "cannot connect to the head at {}: {}", endpoint, e.what());
  }
}

ControlClient::~ControlClient() = default;

void ControlClient::send(const StageMessage& message) {
  std::string bytes = encode_message(message);
  socket_.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
}

void ControlClient::wait(std::chrono::milliseconds timeout, int wake_fd) { wait_on(socket_, timeout, wake_fd); }

void ControlClient::drop_unsent() { socket_.set(zmq::sockopt::linger, 0); }

void wait_any(const std::vector<ControlClient*>& clients, std::chrono::milliseconds timeout, int wake_fd) {
  std::vector<zmq::pollitem_t> items;
  for (ControlClient* client : clients) items.push_back({client->socket_.handle(), 0, ZMQ_POLLIN, 0});
  if (wake_fd >= 0) items.push_back({nullptr, wake_fd, ZMQ_POLLIN, 0});
  try {
    zmq::poll(items.data(), items.size(), timeout);
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw;
  }
}

std::optional<StageMessage> ControlClient::receive() {
  while (true) {
    zmq::message_t body;
    if (!socket_.recv(body, zmq::recv_flags::dontwait)) return std::nullopt;
    try {
      return decode_message(body.to_string_view(), "the head at " + endpoint_);
    } catch (const Error& e) {
      spdlog::warn("{}; skipped", e.what());
    }
  }
}

}  // namespace omni::runtime
