#include "runtime/child_process.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <thread>
#include <utility>

#include "base/error.h"

extern char** environ;

namespace omni::runtime {

std::string ExitStatus::describe() const {
  if (signal != 0) {
    const char* name = sigabbrev_np(signal);
    return name ? fmt::format("was killed by signal {} (SIG{})", signal, name)
                : fmt::format("was killed by signal {}", signal);
  }
  return fmt::format("exited with code {}", code);
}

namespace {

ExitStatus from_wait_status(int status) {
  ExitStatus exit;
  if (WIFSIGNALED(status)) {
    exit.signal = WTERMSIG(status);
  } else {
    exit.code = WEXITSTATUS(status);
  }
  return exit;
}

std::vector<std::string> child_environment(const std::vector<std::string>& changes) {
  std::map<std::string, std::string> vars;
  std::vector<std::string> order;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    std::string name = entry.substr(0, entry.find('='));
    if (!vars.count(name)) order.push_back(name);
    vars[name] = entry;
  }
  for (const std::string& change : changes) {
    size_t eq = change.find('=');
    std::string name = change.substr(0, eq);
    if (eq == std::string::npos) {
      vars.erase(name);
    } else {
      if (!vars.count(name)) order.push_back(name);
      vars[name] = change;
    }
  }
  std::vector<std::string> result;
  for (const std::string& name : order) {
    if (auto it = vars.find(name); it != vars.end()) result.push_back(it->second);
  }
  return result;
}

}  // namespace

ChildProcess ChildProcess::spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings = child_environment(env);
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t parent = getpid();

  // exec failure travels back through a close-on-exec pipe: EOF means exec succeeded.
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    throw_error(ErrorCode::kUnavailable, "cannot start {}: pipe: {}", argv[0], std::strerror(errno));
  }
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(report[0]);
    close(report[1]);
    throw_error(ErrorCode::kUnavailable, "cannot start {}: fork: {}", argv[0], std::strerror(err));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, 0);
    close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(args[0], args.data(), envp.data());
    int err = errno;
    ssize_t written = write(report[1], &err, sizeof err);
    (void)written;
    _exit(127);
  }
  // The group is also set here, so kill(-pid) works even before the child ran setpgid.
  setpgid(pid, pid);
  close(report[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(report[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  close(report[0]);
  ChildProcess child(pid);
  if (n == sizeof child_errno) {
    child.wait_or_kill(std::chrono::milliseconds(0));
    throw_error(ErrorCode::kUnavailable, "cannot start {}: {}", argv[0], std::strerror(child_errno));
  }
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept : pid_(other.pid_), status_(other.status_) {
  other.pid_ = -1;
}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0 && !status_) wait_or_kill(std::chrono::milliseconds(0));
    pid_ = other.pid_;
    status_ = other.status_;
    other.pid_ = -1;
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !status_) wait_or_kill(std::chrono::milliseconds(0));
}

std::optional<ExitStatus> ChildProcess::poll() {
  if (status_ || pid_ <= 0) return status_;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    status_ = from_wait_status(status);
    kill(-pid_, SIGKILL);  // anything the stage started goes with it
  }
  return status_;
}

void ChildProcess::signal_group(int signal) {
  if (pid_ > 0 && !status_) kill(-pid_, signal);
}

ExitStatus ChildProcess::wait_or_kill(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!poll()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(-pid_, SIGKILL);
      int status = 0;
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      status_ = from_wait_status(status);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return *status_;
}

ProcessWatch::ProcessWatch(pid_t pid) : pid_(pid) {
  fd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd_ < 0) throw_error(ErrorCode::kUnavailable, "cannot watch process {}: {}", pid, std::strerror(errno));
}

ProcessWatch::ProcessWatch(ProcessWatch&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), fd_(std::exchange(other.fd_, -1)) {}

ProcessWatch& ProcessWatch::operator=(ProcessWatch&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    pid_ = std::exchange(other.pid_, -1);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

ProcessWatch::~ProcessWatch() {
  if (fd_ >= 0) close(fd_);
}

bool ProcessWatch::ended() const {
  if (fd_ < 0) return true;
  pollfd item{fd_, POLLIN, 0};
  return ::poll(&item, 1, 0) > 0;
}

}  // namespace omni::runtime
