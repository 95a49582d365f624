#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/thread_pool.h"

namespace omni::tensor::cpu {

void softmax(const Tensor& x, Tensor& out) {
  const int64_t n = x.dim(1);
  const float* in = x.data<float>();
  float* o = out.data<float>();
  parallel_for(x.dim(0), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = in + r * n;
      float* dst = o + r * n;
      const float max = *std::max_element(row, row + n);
      float sum = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = std::exp(row[i] - max);
        sum += dst[i];
      }
      const float inv = 1.0f / sum;
      for (int64_t i = 0; i < n; ++i) dst[i] *= inv;
    }
  });
}

void argmax(const Tensor& x, Tensor& out) {
  const int64_t n = x.dim(1);
  const float* in = x.data<float>();
  int32_t* o = out.data<int32_t>();
  parallel_for(x.dim(0), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = in + r * n;
      o[r] = static_cast<int32_t>(std::max_element(row, row + n) - row);
    }
  });
}

void top_k(const Tensor& x, int k, Tensor& values, Tensor& indices) {
  const int64_t n = x.dim(1);
  const float* in = x.data<float>();
  float* vals = values.data<float>();
  int32_t* idx = indices.data<int32_t>();
  parallel_for(x.dim(0), 1, [&](int64_t begin, int64_t end) {
    std::vector<int32_t> order(n);
    for (int64_t r = begin; r < end; ++r) {
      const float* row = in + r * n;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      for (int i = 0; i < k; ++i) {
        idx[r * k + i] = order[i];
        vals[r * k + i] = row[order[i]];
      }
    }
  });
}

}  // namespace omni::tensor::cpu
