// The address that several API frontends share (serve --api-server-count N): the launcher binds a
// socket to it with SO_REUSEPORT and never listens on it, which fixes the port (--port 0 picks a
// free one) for the frontends, each of which then listens on the same address with SO_REUSEPORT
// (HttpServerOptions::reuse_port). A socket that only binds takes no connections.
//
// Threads: one thread uses an object.
#pragma once

#include <cstdint>
#include <string>

namespace omni::server {

class PortReservation {
 public:
  // Throws omni::Error: kInvalidArgument when `host` is not an IP address, kUnavailable naming
  // host:port when it cannot be bound.
  PortReservation(const std::string& host, uint16_t port);
  ~PortReservation();
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;

  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

}  // namespace omni::server
