// Times the decode-path CUDA ops on device 0: a 1 x 4096 x 4096 bf16 linear (the weight-streaming
// bound of a decode step) and decode paged attention (one new token per sequence, Qwen3-8B's
// 32 query / 8 kv heads, head_dim 128, bf16 cache). Prints one line per case with the time per
// call and the bandwidth that implies for the bytes the op must read.
//
//   cuda_op_bench [iterations]
//
// Times are host wall-clock over `iterations` back-to-back calls between two stream
// synchronisations, so they include launch overhead (no CUDA graphs).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "tensor/backend.h"
#include "tensor/cuda/device.h"
#include "tensor/ops.h"

namespace {

using omni::tensor::Device;
using omni::tensor::DType;
using omni::tensor::Tensor;
namespace ops = omni::tensor::ops;

Tensor random_bf16(const omni::tensor::Shape& shape, std::mt19937& rng) {
  Tensor host = Tensor::empty(shape, DType::kBF16);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  uint16_t* data = host.data<uint16_t>();
  for (int64_t i = 0; i < host.numel(); ++i) data[i] = omni::tensor::f32_to_bf16(normal(rng));
  return host.to(Device::cuda(0));
}

template <typename F>
double seconds_per_call(int iterations, F&& call) {
  for (int i = 0; i < 5; ++i) call();  // plans, caches, clocks
  omni::tensor::cuda::synchronize(0);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) call();
  omni::tensor::cuda::synchronize(0);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
}

void report(const char* name, double seconds, double bytes) {
  std::printf("%-48s %9.2f us  %7.0f GB/s\n", name, seconds * 1e6, bytes / seconds / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  if (omni::tensor::cuda_device_count() == 0) {
    std::fprintf(stderr, "cuda_op_bench: no CUDA device visible\n");
    return 1;
  }
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 200;
  std::mt19937 rng(7);

  for (int m : {1, 8, 32}) {
    Tensor x = random_bf16({m, 4096}, rng), w = random_bf16({4096, 4096}, rng);
    Tensor out = Tensor::empty({m, 4096}, DType::kBF16, Device::cuda(0));
    const double s = seconds_per_call(iterations, [&] { ops::linear(x, w, Tensor(), out); });
    char name[96];
    std::snprintf(name, sizeof name, "linear bf16 %d x 4096 x 4096", m);
    report(name, s, 4096.0 * 4096 * 2);
  }

  const int heads = 32, kv_heads = 8, head_dim = 128, block = 16;
  for (int batch : {1, 32}) {
    for (int context : {1024, 4096}) {
      const int blocks_per_seq = (context + 1 + block - 1) / block;
      Tensor k_cache = random_bf16({batch * blocks_per_seq, block, kv_heads, head_dim}, rng);
      Tensor v_cache = random_bf16({batch * blocks_per_seq, block, kv_heads, head_dim}, rng);
      Tensor q = random_bf16({batch, heads, head_dim}, rng);
      Tensor out = Tensor::empty({batch, heads, head_dim}, DType::kBF16, Device::cuda(0));
      std::vector<std::vector<int32_t>> tables(batch);
      std::vector<ops::PagedSequence> seqs(batch);
      for (int s = 0; s < batch; ++s) {
        for (int b = 0; b < blocks_per_seq; ++b) tables[s].push_back(s * blocks_per_seq + b);
        seqs[s] = {s, 1, context, tables[s]};
      }
      const double sec =
          seconds_per_call(iterations, [&] { ops::paged_attention(q, k_cache, v_cache, seqs, 0.088f, 0, out); });
      char name[96];
      std::snprintf(name, sizeof name, "decode attention bf16 batch %d context %d", batch, context);
      report(name, sec, 2.0 * batch * (context + 1) * kv_heads * head_dim * 2);
    }
  }
  return 0;
}
