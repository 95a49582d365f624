// The row softmax of dense_attention (cuda/image_kernels.h): one block per row.
#include "tensor/cuda/common.cuh"
#include "tensor/cuda/image_kernels.h"

namespace omni::tensor::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void scaled_softmax_kernel(const float* scores, T* probs, int64_t n, float scale) {
  __shared__ float scratch[32];
  const float* row = scores + blockIdx.x * n;
  T* dst = probs + blockIdx.x * n;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, row[j] * scale);
  mx = block_max(mx, scratch);
  float total = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) total += expf(row[j] * scale - mx);
  const float inv = 1.0f / block_sum(total, scratch);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) dst[j] = from_float<T>(expf(row[j] * scale - mx) * inv);
}

}  // namespace

void scaled_softmax(const Tensor& scores, float scale, Tensor&& probs) {
  const int64_t rows = scores.dim(0), n = scores.dim(1);
  if (rows == 0 || n == 0) return;
  with_float_type(probs.dtype(), [&](auto tag) {
    using T = decltype(tag);
    scaled_softmax_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream_for(probs.device().index)>>>(
        ptr<float>(scores), ptr<T>(probs), n, scale);
  });
  check_launch("scaled_softmax_kernel", probs);
}

}  // namespace omni::tensor::cuda
