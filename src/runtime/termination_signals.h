// SIGINT and SIGTERM as a readable file descriptor, for processes that shut down cleanly: the
// constructor blocks both signals in the calling thread — and so in every thread it starts
// afterwards — so no other thread is interrupted and the owner sees them in its own poll loop.
// Construct it in main (or the stage worker) before starting threads.
#pragma once

namespace omni::runtime {

class TerminationSignals {
 public:
  TerminationSignals();
  ~TerminationSignals();
  TerminationSignals(const TerminationSignals&) = delete;
  TerminationSignals& operator=(const TerminationSignals&) = delete;

  // Readable while a signal is pending.
  int fd() const { return fd_; }
  // The pending signal's number, or 0; never blocks.
  int take() const;
  // Blocks until SIGINT or SIGTERM arrives; returns its number.
  int wait() const;

 private:
  int fd_ = -1;
};

}  // namespace omni::runtime
