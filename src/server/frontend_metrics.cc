#include "server/frontend_metrics.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "base/error.h"

namespace omni::server {

FrontendMetrics::FrontendMetrics(const MetricsRegistry& registry, std::string session, int index, int count,
                                 std::chrono::milliseconds interval)
    : registry_(registry), session_(std::move(session)), index_(index), count_(count), interval_(interval) {}

FrontendMetrics::~FrontendMetrics() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_signal_.notify_all();
  if (writer_.joinable()) writer_.join();
}

std::string FrontendMetrics::snapshot_path(const std::string& session, int index) {
  return fmt::format("/dev/shm/omnistage_{}_frontend{}.metrics", session, index);
}

void FrontendMetrics::write_snapshot() const {
  const std::string path = snapshot_path(session_, index_);
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << registry_.render_prometheus();
    if (!out.good()) throw_error(ErrorCode::kUnavailable, "cannot write the metrics snapshot {}", temporary);
  }
  // Readers see the old snapshot or the new one, never half of one.
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    throw_error(ErrorCode::kUnavailable, "cannot write the metrics snapshot {}: {}", path, std::strerror(errno));
  }
}

void FrontendMetrics::start() {
  write_snapshot();
  writer_ = std::thread([this] {
    std::unique_lock lock(mutex_);
    while (!stop_signal_.wait_for(lock, interval_, [this] { return stopping_; })) {
      try {
        write_snapshot();
      } catch (const Error& e) {
        spdlog::warn("{}", e.what());
      }
    }
  });
}

std::string FrontendMetrics::render() const {
  std::vector<std::string> texts;
  for (int i = 0; i < count_; ++i) {
    if (i == index_) {
      texts.push_back(registry_.render_prometheus());
      continue;
    }
    std::ifstream in(snapshot_path(session_, i));
    if (!in) continue;  // that frontend is (re)starting
    std::stringstream text;
    text << in.rdbuf();
    texts.push_back(text.str());
  }
  return merge_prometheus_texts(texts);
}

}  // namespace omni::server
