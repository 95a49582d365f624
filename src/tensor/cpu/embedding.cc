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

void substitute_ids(const Tensor& source, const Tensor& rows, Tensor& ids) {
  const int32_t* src = source.data<int32_t>();
  const int32_t* row = rows.data<int32_t>();
  int32_t* out = ids.data<int32_t>();
  for (int64_t t = 0; t < ids.numel(); ++t) {
    if (row[t] >= 0) out[t] = src[row[t]];
  }
}

}  // namespace omni::tensor::cpu
