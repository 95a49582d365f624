#include <cmath>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/thread_pool.h"

namespace omni::tensor::cpu {

void silu_and_mul(const Tensor& x, Tensor& out) {
  const int64_t inter = out.dim(1);
  const float* in = x.data<float>();
  float* o = out.data<float>();
  parallel_for(out.dim(0), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* gate = in + r * 2 * inter;
      const float* up = gate + inter;
      float* dst = o + r * inter;
      for (int64_t i = 0; i < inter; ++i) dst[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
    }
  });
}

void gelu(const Tensor& x, ops::GeluApproximation approximation, Tensor& out) {
  const float* in = x.data<float>();
  float* o = out.data<float>();
  parallel_for(x.numel(), 16384, [&](int64_t begin, int64_t end) {
    if (approximation == ops::GeluApproximation::kTanh) {
      constexpr float kSqrt2OverPi = 0.7978845608028654f;
      for (int64_t i = begin; i < end; ++i) {
        const float v = in[i];
        o[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
      }
    } else {
      constexpr float kInvSqrt2 = 0.7071067811865476f;
      for (int64_t i = begin; i < end; ++i) o[i] = 0.5f * in[i] * (1.0f + std::erf(in[i] * kInvSqrt2));
    }
  });
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  float* o = out.data<float>();
  parallel_for(a.numel(), 65536, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) o[i] = x[i] + y[i];
  });
}

}  // namespace omni::tensor::cpu
