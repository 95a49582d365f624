// The server's bound on generation requests in flight (submitted to the backend and not yet
// finished, queued or running in the stages): past it a new request is answered 503 with
// Retry-After at once instead of joining an ever longer queue, so that overload costs neither
// unbounded memory nor unbounded latency.
//
// Threads: any thread may call acquire() and release().
#pragma once

#include <cstddef>
#include <mutex>

namespace omni::server {

class InflightLimit {
 public:
  // `limit` 0: no bound.
  explicit InflightLimit(size_t limit) : limit_(limit) {}

  // Takes `count` places (one per backend request). Throws RetryLater (503) when fewer are free,
  // and Error(kInvalidArgument) when `count` alone is more than the limit (the request could
  // never be admitted).
  void acquire(size_t count);
  void release(size_t count);

  size_t in_flight() const;
  size_t limit() const { return limit_; }

 private:
  const size_t limit_;
  mutable std::mutex mutex_;
  size_t in_flight_ = 0;
};

}  // namespace omni::server
