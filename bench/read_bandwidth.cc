// Measures how fast this machine streams memory it only reads, with all cores: the ceiling for
// single-sequence decode, which reads every weight once per token. docs/performance.md puts the
// decode figure next to this one measured in the same session.
//   build/bench/read_bandwidth [GiB]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tensor/cpu/thread_pool.h"

int main(int argc, char** argv) {
  const double gib = argc > 1 ? std::atof(argv[1]) : 2.0;
  constexpr size_t kChunks = 256;
  // A whole number of chunks, so every float is read once.
  const size_t chunk = static_cast<size_t>(gib * (1u << 30) / sizeof(float)) / kChunks;
  const size_t n = chunk * kChunks;
  std::vector<float> data(n, 1.0f);
  double best = 0.0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<double> partial(kChunks, 0.0);
    const auto start = std::chrono::steady_clock::now();
    omni::tensor::cpu::parallel_for(kChunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        float acc[16] = {};
        const float* p = data.data() + chunk * c;
        for (size_t i = 0; i + 16 <= chunk; i += 16)
          for (int j = 0; j < 16; ++j) acc[j] += p[i + j];
        for (float a : acc) partial[c] += a;
      }
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double sum = 0.0;
    for (double v : partial) sum += v;
    if (sum <= 0.0) return 1;  // keeps the reads from being optimised away
    best = std::max(best, static_cast<double>(n * sizeof(float)) / s / 1e9);
  }
  std::printf("read bandwidth: %.1f GB/s (%d threads, %.1f GiB buffer, best of 5)\n", best,
              omni::tensor::cpu::thread_count(), gib);
  return 0;
}
