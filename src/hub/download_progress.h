// Progress of one snapshot download, shown on stderr: on a terminal, a bar per file being
// downloaded and one for the whole snapshot (bytes, rate, time left), redrawn a few times a
// second; otherwise (a log file, CI) an info log line every few seconds and one per finished file.
// Every method may be called from any download worker.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace omni::hub {

class DownloadProgress {
 public:
  // `repo` names the download in every line; `interactive` draws bars (stderr is a terminal).
  DownloadProgress(std::string repo, int files, bool interactive);
  ~DownloadProgress();  // stops the reporter and prints the summary line
  DownloadProgress(const DownloadProgress&) = delete;
  DownloadProgress& operator=(const DownloadProgress&) = delete;

  // A file of `size` bytes starts, `resumed` of them already on disk from an earlier run.
  void start_file(const std::string& file, uint64_t size, uint64_t resumed);
  void add_bytes(const std::string& file, uint64_t bytes);
  // The file is in the cache (downloaded now, or found there: then `size` counts as done).
  void finish_file(const std::string& file, uint64_t size, bool downloaded);

 private:
  struct Active {
    uint64_t size = 0;
    uint64_t done = 0;
  };
  void report_loop();
  void draw_locked(bool final);
  void log_locked();

  std::string repo_;
  int files_total_;
  bool interactive_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::map<std::string, Active> active_;
  int files_done_ = 0;
  uint64_t bytes_known_ = 0;    // sizes of the files started or finished
  uint64_t bytes_done_ = 0;     // bytes in the cache, resumed and found ones included
  uint64_t bytes_fetched_ = 0;  // bytes received in this run (the rate)
  int lines_drawn_ = 0;
  std::thread reporter_;
};

// "12.3 MB", "1.50 GB", "512 B".
std::string human_bytes(uint64_t bytes);

}  // namespace omni::hub
