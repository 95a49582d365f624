// Measures how fast this machine copies a file that is in the page cache into memory, the two ways
// a checkpoint loader can (docs/performance.md, loading): memcpy out of a fresh read-only mapping
// (page faults set up the page tables as the copy goes) and pread, both in 16 MB chunks split over
// all cores as the CUDA loader's staging does (tensor/cuda/upload.cu).
//   build/bench/file_read_bench FILE
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tensor/cpu/thread_pool.h"

namespace {

constexpr int64_t kChunk = int64_t{16} << 20, kPiece = int64_t{1} << 20;

double seconds(const std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: file_read_bench FILE\n");
    return 2;
  }
  const int fd = ::open(argv[1], O_RDONLY);
  if (fd < 0) {
    std::perror(argv[1]);
    return 1;
  }
  const int64_t size = ::lseek(fd, 0, SEEK_END);
  std::vector<char> buffer(kChunk);
  for (const bool mapped : {true, false, true, false}) {
    const auto start = std::chrono::steady_clock::now();
    const char* mapping =
        mapped ? static_cast<const char*>(::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0))
               : nullptr;
    for (int64_t at = 0; at < size; at += kChunk) {
      const int64_t bytes = std::min(kChunk, size - at);
      omni::tensor::cpu::parallel_for((bytes + kPiece - 1) / kPiece, 1, [&](int64_t begin, int64_t end) {
        const int64_t first = begin * kPiece, last = std::min(bytes, end * kPiece);
        if (mapped) {
          std::memcpy(buffer.data() + first, mapping + at + first, static_cast<size_t>(last - first));
        } else if (::pread(fd, buffer.data() + first, static_cast<size_t>(last - first), at + first) < 0) {
          std::perror("pread");
        }
      });
    }
    const double s = seconds(start);
    if (mapped) ::munmap(const_cast<char*>(mapping), static_cast<size_t>(size));
    std::printf("%s: %.2f GB in %.2f s, %.2f GB/s (%d threads)\n", mapped ? "memcpy from a fresh mapping" : "pread",
                size / 1e9, s, size / 1e9 / s, omni::tensor::cpu::thread_count());
  }
  return 0;
}
