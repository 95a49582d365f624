#include "server/port_reservation.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace omni::server {

PortReservation::PortReservation(const std::string& host, uint16_t port) {
  sockaddr_storage address{};
  socklen_t length = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    length = sizeof *v4;
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    length = sizeof *v6;
  } else {
    throw_error(ErrorCode::kInvalidArgument, "--host {}: not an IP address", host);
  }
  auto fail = [&](const char* what) {
    const int error = errno;
    if (fd_ >= 0) close(fd_);
    throw_error(ErrorCode::kUnavailable, "cannot listen on {}:{}: {} failed: {}", host, port, what,
                std::strerror(error));
  };
  fd_ = socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) fail("socket");
  const int one = 1;
  if (setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) fail("setsockopt(SO_REUSEADDR)");
  if (setsockopt(fd_, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) fail("setsockopt(SO_REUSEPORT)");
  if (bind(fd_, reinterpret_cast<sockaddr*>(&address), length) != 0) fail("bind");
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof bound;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &bound_length) != 0) fail("getsockname");
  port_ = ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                           : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
}

PortReservation::~PortReservation() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace omni::server
