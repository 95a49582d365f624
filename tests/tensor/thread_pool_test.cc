#include "tensor/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace omni::tensor::cpu {
namespace {

TEST(ThreadPoolTest, EveryIndexRunsExactlyOnce) {
  for (int64_t n : {1, 7, 1000, 100003}) {
    std::vector<std::atomic<int>> hits(n);
    parallel_for(n, 3, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPoolTest, UsesEveryCoreAndRunsNestedCallsInline) {
  EXPECT_EQ(thread_count(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  std::atomic<int64_t> total{0};
  parallel_for(64, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      parallel_for(10, 1, [&](int64_t b, int64_t e) { total += e - b; });
    }
  });
  EXPECT_EQ(total.load(), 640);
}

TEST(ThreadPoolTest, AnExceptionReachesTheCallerAfterAllChunks) {
  std::atomic<int64_t> done{0};
  EXPECT_THROW(parallel_for(1000, 1,
                            [&](int64_t begin, int64_t end) {
                              done += end - begin;
                              if (begin == 0) throw std::runtime_error("chunk failed");
                            }),
               std::runtime_error);
  EXPECT_EQ(done.load(), 1000);
  // The pool still works afterwards.
  std::atomic<int64_t> again{0};
  parallel_for(1000, 1, [&](int64_t begin, int64_t end) { again += end - begin; });
  EXPECT_EQ(again.load(), 1000);
}

}  // namespace
}  // namespace omni::tensor::cpu
