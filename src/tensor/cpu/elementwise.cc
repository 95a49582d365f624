#include <algorithm>
#include <cmath>
#include <vector>

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

void snake_beta(const Tensor& x, const Tensor& alpha, const Tensor& beta, Tensor& out) {
  const int64_t channels = x.dim(1);
  std::vector<float> freq(static_cast<size_t>(channels)), inv_mag(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    freq[c] = std::exp(alpha.data<float>()[c]);
    inv_mag[c] = 1.0f / (std::exp(beta.data<float>()[c]) + 1e-9f);
  }
  const float* in = x.data<float>();
  float* o = out.data<float>();
  parallel_for(x.dim(0), std::max<int64_t>(1, 16384 / std::max<int64_t>(channels, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* row = in + t * channels;
      float* dst = o + t * channels;
      for (int64_t c = 0; c < channels; ++c) {
        const float s = std::sin(freq[c] * row[c]);
        dst[c] = row[c] + inv_mag[c] * (s * s);
      }
    }
  });
}

void add_scaled(const Tensor& a, const Tensor& b, const Tensor& scale, Tensor& out) {
  const int64_t d = a.dim(-1);
  const int64_t rows = d == 0 ? 0 : a.numel() / d;
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  const float* s = scale.data<float>();
  float* o = out.data<float>();
  parallel_for(rows, std::max<int64_t>(1, 65536 / std::max<int64_t>(d, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t i = 0; i < d; ++i) o[r * d + i] = x[r * d + i] + y[r * d + i] * s[i];
    }
  });
}

void add_row_scaled(const Tensor& a, const Tensor& b, const Tensor& scale, Tensor& out) {
  const int64_t rows = a.dim(0), d = a.dim(1);
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  const float* s = scale.data<float>();
  float* o = out.data<float>();
  parallel_for(rows, std::max<int64_t>(1, 65536 / std::max<int64_t>(d, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t i = 0; i < d; ++i) o[r * d + i] = x[r * d + i] + y[r * d + i] * s[r];
    }
  });
}

void clamp(const Tensor& x, float lo, float hi, Tensor& out) {
  const float* in = x.data<float>();
  float* o = out.data<float>();
  parallel_for(x.numel(), 65536, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) o[i] = std::min(std::max(in[i], lo), hi);
  });
}

}  // namespace omni::tensor::cpu
