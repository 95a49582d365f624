#include <algorithm>
#include <cstring>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/thread_pool.h"

namespace omni::tensor::cpu {

void embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  const int64_t hidden = table.dim(1);
  const float* src = table.data<float>();
  const int32_t* id = ids.data<int32_t>();
  float* dst = out.data<float>();
  parallel_for(ids.numel(), 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      std::memcpy(dst + t * hidden, src + static_cast<int64_t>(id[t]) * hidden, hidden * sizeof(float));
    }
  });
}

void gather_weighted_sum(const Tensor& src, const Tensor& index, const Tensor& weights, Tensor& out) {
  const int64_t hidden = src.dim(1), k = index.dim(1);
  const float* rows = src.data<float>();
  const int32_t* id = index.data<int32_t>();
  const float* w = weights.data<float>();
  float* dst = out.data<float>();
  parallel_for(index.dim(0), 4, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* o = dst + t * hidden;
      std::fill_n(o, hidden, 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        const float* r = rows + static_cast<int64_t>(id[t * k + j]) * hidden;
        const float wj = w[t * k + j];
        for (int64_t h = 0; h < hidden; ++h) o[h] += wj * r[h];
      }
    }
  });
}

void substitute_ids(const Tensor& source, const Tensor& rows, Tensor& ids) {
  const int32_t* src = source.data<int32_t>();
  const int32_t* row = rows.data<int32_t>();
  int32_t* out = ids.data<int32_t>();
  for (int64_t t = 0; t < ids.numel(); ++t) {
    if (row[t] >= 0) out[t] = src[row[t]];
  }
}

}  // namespace omni::tensor::cpu
