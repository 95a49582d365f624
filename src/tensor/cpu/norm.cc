#include <algorithm>
#include <cmath>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/thread_pool.h"

namespace omni::tensor::cpu {

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  const int64_t d = x.dim(-1);
  const int64_t rows = x.numel() / d;
  const float* in = x.data<float>();
  const float* w = weight.data<float>();
  float* o = out.data<float>();
  parallel_for(rows, std::max<int64_t>(1, 4096 / d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = in + r * d;
      float sum = 0.0f;
      for (int64_t i = 0; i < d; ++i) sum += row[i] * row[i];
      const float inv = 1.0f / std::sqrt(sum / static_cast<float>(d) + eps);
      float* dst = o + r * d;
      for (int64_t i = 0; i < d; ++i) dst[i] = (row[i] * inv) * w[i];
    }
  });
}

void add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& weight, float eps, Tensor& out) {
  const float* in = x.data<float>();
  float* res = residual.data<float>();
  parallel_for(x.numel(), 65536, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) res[i] += in[i];
  });
  rms_norm(residual, weight, eps, out);
}

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out) {
  const int64_t d = x.dim(-1);
  const int64_t rows = d == 0 ? 0 : x.numel() / d;
  const float* in = x.data<float>();
  const float* w = weight.data<float>();
  const float* b = bias.data<float>();
  float* o = out.data<float>();
  parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(d, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = in + r * d;
      float sum = 0.0f;
      for (int64_t i = 0; i < d; ++i) sum += row[i];
      const float mean = sum / static_cast<float>(d);
      float var = 0.0f;
      for (int64_t i = 0; i < d; ++i) var += (row[i] - mean) * (row[i] - mean);
      const float inv = 1.0f / std::sqrt(var / static_cast<float>(d) + eps);
      float* dst = o + r * d;
      for (int64_t i = 0; i < d; ++i) dst[i] = (row[i] - mean) * inv * w[i] + b[i];
    }
  });
}

}  // namespace omni::tensor::cpu
