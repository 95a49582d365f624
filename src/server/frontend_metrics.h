// GET /metrics of one API frontend among several (serve --api-server-count N): every frontend
// keeps its own registry and writes its exposition to a snapshot file beside the session's shared
// memory (/dev/shm/omnistage_<session>_frontend<i>.metrics) now and then; any frontend's /metrics
// merges its own fresh exposition with the others' latest snapshots (merge_prometheus_texts: the
// same series summed over the frontends, per-frontend series by their `frontend` label). A
// snapshot is at most `interval` old. The launcher removes the files with the session.
//
// Threads: start() and the destructor from one thread; render() from any. The writer is its own
// thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "base/metrics.h"

namespace omni::server {

class FrontendMetrics {
 public:
  // `registry` must outlive this object.
  FrontendMetrics(const MetricsRegistry& registry, std::string session, int index, int count,
                  std::chrono::milliseconds interval = std::chrono::milliseconds(250));
  ~FrontendMetrics();
  FrontendMetrics(const FrontendMetrics&) = delete;
  FrontendMetrics& operator=(const FrontendMetrics&) = delete;

  // Writes the first snapshot (the launcher waits for it: the frontend is serving) and starts the
  // periodic writer. Throws omni::Error(kUnavailable) naming the file when it cannot be written.
  void start();
  // The merged exposition of every frontend.
  std::string render() const;

  static std::string snapshot_path(const std::string& session, int index);

 private:
  void write_snapshot() const;

  const MetricsRegistry& registry_;
  const std::string session_;
  const int index_;
  const int count_;
  const std::chrono::milliseconds interval_;
  std::mutex mutex_;
  std::condition_variable stop_signal_;
  bool stopping_ = false;
  std::thread writer_;
};

}  // namespace omni::server
