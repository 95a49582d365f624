#include "tensor/cuda/common.cuh"
#include "tensor/cuda/uniform_fill.h"
#include "tensor/uniform_fill.h"

namespace omni::tensor::cuda {
namespace {

template <typename T>
__global__ void fill_uniform_kernel(T* dst, size_t count, uint64_t seed, uint64_t first_index, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    dst[i] = from_float<T>(uniform_value(seed, first_index + i, lo, hi));
  }
}

}  // namespace

void fill_uniform(void* dst, DType dtype, size_t count, uint64_t seed, uint64_t first_index, float lo, float hi,
                  int index) {
  constexpr int kThreads = 256;
  const unsigned blocks = blocks_for(static_cast<int64_t>(count), kThreads);
  with_float_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_uniform_kernel<T>
        <<<blocks, kThreads, 0, stream_for(index)>>>(static_cast<T*>(dst), count, seed, first_index, lo, hi);
  });
  check(cudaGetLastError(), "fill_uniform_kernel", index);
}

}  // namespace omni::tensor::cuda
