#include "tensor/cpu/thread_pool.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace omni::tensor::cpu {
namespace {

thread_local bool t_inside_pool = false;

class ThreadPool {
 public:
  explicit ThreadPool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void run(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& body) {
    std::lock_guard caller(call_mutex_);
    {
      std::lock_guard lock(mutex_);
      body_ = &body;
      n_ = n;
      chunk_ = chunk;
      next_ = 0;
      pending_ = (n + chunk - 1) / chunk;
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    t_inside_pool = true;
    drain();
    t_inside_pool = false;
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    body_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work() {
    t_inside_pool = true;
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      drain();
    }
  }

  // Takes chunks until none are left.
  void drain() {
    for (;;) {
      int64_t begin;
      const std::function<void(int64_t, int64_t)>* body;
      {
        std::lock_guard lock(mutex_);
        if (body_ == nullptr || next_ >= n_) return;
        begin = next_;
        next_ += chunk_;
        body = body_;
      }
      std::exception_ptr error;
      try {
        (*body)(begin, std::min(begin + chunk_, n_));
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard lock(mutex_);
      if (error && !error_) error_ = error;
      if (--pending_ == 0) done_.notify_all();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t n_ = 0, chunk_ = 1, next_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
};

ThreadPool& pool() {
  static ThreadPool instance(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  return instance;
}

}  // namespace

int thread_count() { return pool().size(); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int threads = thread_count();
  if (t_inside_pool || threads == 1 || n <= grain) {
    body(0, n);
    return;
  }
  // A few chunks per thread balance uneven work without much locking.
  const int64_t per_thread = int64_t{4} * threads;
  const int64_t chunk = std::max(grain, (n + per_thread - 1) / per_thread);
  pool().run(n, chunk, body);
}

}  // namespace omni::tensor::cpu
