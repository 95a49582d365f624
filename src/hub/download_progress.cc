#include "hub/download_progress.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

namespace omni::hub {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kRedraw = std::chrono::milliseconds(200);
constexpr auto kLogEvery = std::chrono::seconds(5);
constexpr int kBarWidth = 24;

std::string human_duration(double seconds) {
  if (seconds < 0 || seconds > 360000) return "?";
  const long s = std::lround(seconds);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s / 60) % 60);
}

std::string bar(uint64_t done, uint64_t total) {
  const int filled = total == 0 ? kBarWidth : static_cast<int>(kBarWidth * std::min(1.0, double(done) / double(total)));
  std::string out(kBarWidth + 2, ' ');
  out.front() = '[';
  out.back() = ']';
  std::fill_n(out.begin() + 1, filled, '#');
  return out;
}

std::string shortened(const std::string& name, size_t width) {
  if (name.size() <= width) return name + std::string(width - name.size(), ' ');
  return "…" + name.substr(name.size() - (width - 1));
}

}  // namespace

std::string human_bytes(uint64_t bytes) {
  if (bytes < 1000) return fmt::format("{} B", bytes);
  const char* units[] = {"kB", "MB", "GB", "TB"};
  double value = double(bytes) / 1000;
  int unit = 0;
  while (value >= 1000 && unit < 3) {
    value /= 1000;
    ++unit;
  }
  const int decimals = value < 10 ? 2 : value < 100 ? 1 : 0;
  return fmt::format("{:.{}f} {}", value, decimals, units[unit]);
}

DownloadProgress::DownloadProgress(std::string repo, int files, bool interactive)
    : repo_(std::move(repo)), files_total_(files), interactive_(interactive) {
  reporter_ = std::thread([this] { report_loop(); });
}

DownloadProgress::~DownloadProgress() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  reporter_.join();
  std::lock_guard lock(mutex_);
  if (interactive_) draw_locked(true);
  const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  spdlog::info("download {}: {} of {} file(s) in the cache, {} received in {:.1f} s ({}/s)", repo_, files_done_,
               files_total_, human_bytes(bytes_fetched_), seconds,
               human_bytes(static_cast<uint64_t>(double(bytes_fetched_) / std::max(seconds, 1e-3))));
}

void DownloadProgress::start_file(const std::string& file, uint64_t size, uint64_t resumed) {
  std::lock_guard lock(mutex_);
  active_[file] = Active{size, resumed};
  bytes_known_ += size;
  bytes_done_ += resumed;
  if (resumed > 0) spdlog::info("download {}: {}: resuming at byte {} of {}", repo_, file, resumed, size);
}

void DownloadProgress::add_bytes(const std::string& file, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  if (auto it = active_.find(file); it != active_.end()) it->second.done += bytes;
  bytes_done_ += bytes;
  bytes_fetched_ += bytes;
}

void DownloadProgress::finish_file(const std::string& file, uint64_t size, bool downloaded) {
  std::lock_guard lock(mutex_);
  if (auto it = active_.find(file); it != active_.end()) {
    bytes_done_ += it->second.size - std::min(it->second.size, it->second.done);
    active_.erase(it);
  } else {
    bytes_known_ += size;
    bytes_done_ += size;
  }
  ++files_done_;
  if (downloaded && !interactive_) spdlog::info("download {}: {} ({}) done", repo_, file, human_bytes(size));
}

void DownloadProgress::report_loop() {
  std::unique_lock lock(mutex_);
  auto next_log = Clock::now() + kLogEvery;
  while (!stopping_) {
    wake_.wait_for(lock, interactive_ ? kRedraw : kLogEvery, [this] { return stopping_; });
    if (stopping_) break;
    if (interactive_) {
      draw_locked(false);
    } else if (Clock::now() >= next_log && !active_.empty()) {
      log_locked();
      next_log = Clock::now() + kLogEvery;
    }
  }
}

void DownloadProgress::draw_locked(bool final) {
  const double seconds = std::max(1e-3, std::chrono::duration<double>(Clock::now() - start_).count());
  const double rate = double(bytes_fetched_) / seconds;
  std::string out;
  if (lines_drawn_ > 0) out += fmt::format("\x1b[{}F", lines_drawn_);  // back to the first line drawn
  int lines = 0;
  if (!final) {
    for (const auto& [file, active] : active_) {
      out += fmt::format("\x1b[2K  {} {} {:>9} / {:<9}\n", shortened(file, 36), bar(active.done, active.size),
                         human_bytes(active.done), human_bytes(active.size));
      ++lines;
    }
  }
  const uint64_t left = bytes_known_ - std::min(bytes_known_, bytes_done_);
  out += fmt::format("\x1b[2K{} {}/{} files {} {:>9} / {:<9} {:>9}/s  ETA {}\n", repo_, files_done_, files_total_,
                     bar(bytes_done_, bytes_known_), human_bytes(bytes_done_), human_bytes(bytes_known_),
                     human_bytes(static_cast<uint64_t>(rate)), rate > 0 ? human_duration(double(left) / rate) : "?");
  ++lines;
  // Lines left over from a longer previous frame are cleared.
  for (int i = lines; i < lines_drawn_; ++i) out += "\x1b[2K\n";
  if (lines_drawn_ > lines) out += fmt::format("\x1b[{}F", lines_drawn_ - lines);
  lines_drawn_ = lines;
  std::fputs(out.c_str(), stderr);
  std::fflush(stderr);
}

void DownloadProgress::log_locked() {
  const double seconds = std::max(1e-3, std::chrono::duration<double>(Clock::now() - start_).count());
  const double rate = double(bytes_fetched_) / seconds;
  const uint64_t left = bytes_known_ - std::min(bytes_known_, bytes_done_);
  spdlog::info("download {}: {}/{} files, {} of {} ({:.0f}%), {}/s, ETA {}", repo_, files_done_, files_total_,
               human_bytes(bytes_done_), human_bytes(bytes_known_),
               bytes_known_ ? 100.0 * double(bytes_done_) / double(bytes_known_) : 100.0,
               human_bytes(static_cast<uint64_t>(rate)), rate > 0 ? human_duration(double(left) / rate) : "?");
}

}  // namespace omni::hub
