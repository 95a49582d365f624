#include "server/inflight_limit.h"

#include <algorithm>

#include "server/openai_error.h"

namespace omni::server {

namespace {
// What a refused client is told to wait: a request in flight takes about that long to finish.
constexpr int kRetryAfterSeconds = 1;
}  // namespace

void InflightLimit::acquire(size_t count) {
  if (limit_ == 0) return;
  if (count > limit_) {
    throw_error(ErrorCode::kInvalidArgument,
                "the request needs {} generation requests at once, more than this server ever takes ({})", count,
                limit_);
  }
  std::lock_guard lock(mutex_);
  if (in_flight_ + count > limit_) {
    throw RetryLater(kRetryAfterSeconds,
                     fmt::format("the server is at its limit of {} requests in flight; retry later", limit_));
  }
  in_flight_ += count;
}

void InflightLimit::release(size_t count) {
  if (limit_ == 0) return;
  std::lock_guard lock(mutex_);
  in_flight_ -= std::min(count, in_flight_);
}

size_t InflightLimit::in_flight() const {
  std::lock_guard lock(mutex_);
  return in_flight_;
}

}  // namespace omni::server
