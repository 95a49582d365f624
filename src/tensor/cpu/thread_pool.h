// The CPU backend's worker threads: one pool per process, sized to the machine's cores.
#pragma once

#include <cstdint>
#include <functional>

namespace omni::tensor::cpu {

// Splits [0, n) into contiguous chunks of at least `grain` items and runs body(begin, end) on
// the pool's threads and the calling thread; returns when every chunk is done. Small ranges run
// inline. Calls from inside a body run inline too (no nested parallelism). Thread-safe: callers
// are serialised. An exception thrown by a body is rethrown here after all chunks finished.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& body);

// Number of threads parallel_for uses (the calling thread included).
int thread_count();

}  // namespace omni::tensor::cpu
