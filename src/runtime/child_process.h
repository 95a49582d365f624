// A stage replica's child process: started in its own process group with PR_SET_PDEATHSIG so it
// dies with the thread that started it, reaped without blocking, killed with its whole group.
//
// Threads: PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, so spawn from a
// thread that lives as long as the child should (the orchestrator's thread). One thread uses an
// object at a time. The destructor kills and reaps a child still running.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace omni::runtime {

struct ExitStatus {
  int code = 0;    // the exit code when it exited
  int signal = 0;  // the signal that killed it, else 0

  // "exited with code 3" / "was killed by signal 9 (SIGKILL)".
  std::string describe() const;
};

class ChildProcess {
 public:
  // Starts `argv` (argv[0]: the executable's path) with `env` added to ("NAME=value", replacing
  // a variable of the same name) or removed from ("NAME" alone) this process's environment.
  // stdin is /dev/null; stdout and stderr are inherited; other descriptors are not.
  // Throws omni::Error(kUnavailable) with the reason when the program cannot be started.
  static ChildProcess spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // Reaps without blocking: the exit status once the process has ended (then on every call).
  std::optional<ExitStatus> poll();
  // Sends `signal` to the child's process group (it and anything it started).
  void signal_group(int signal);
  // Waits until the child ends or `timeout` passes; then SIGKILLs the group and reaps.
  ExitStatus wait_or_kill(std::chrono::milliseconds timeout);

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
  std::optional<ExitStatus> status_;
};

// Watches a process that is not this one's child (a stage replica that an API frontend's launcher
// started) through a pidfd: ended() turns true once it has exited, reaped or not.
class ProcessWatch {
 public:
  // Throws omni::Error(kUnavailable) naming the pid when it cannot be watched (it has ended already).
  explicit ProcessWatch(pid_t pid);
  ProcessWatch(ProcessWatch&& other) noexcept;
  ProcessWatch& operator=(ProcessWatch&& other) noexcept;
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;
  ~ProcessWatch();

  pid_t pid() const { return pid_; }
  bool ended() const;

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
};

}  // namespace omni::runtime
