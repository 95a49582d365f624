#include "runtime/termination_signals.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace omni::runtime {

TerminationSignals::TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  fd_ = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd_ < 0) throw_error(ErrorCode::kInternal, "signalfd: {}", std::strerror(errno));
}

TerminationSignals::~TerminationSignals() { close(fd_); }

int TerminationSignals::take() const {
  signalfd_siginfo info{};
  return read(fd_, &info, sizeof info) == sizeof info ? static_cast<int>(info.ssi_signo) : 0;
}

int TerminationSignals::wait() const {
  while (true) {
    pollfd item{fd_, POLLIN, 0};
    if (poll(&item, 1, -1) < 0 && errno != EINTR) return 0;
    if (int signal = take()) return signal;
  }
}

}  // namespace omni::runtime
