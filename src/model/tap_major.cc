#include "model/tap_major.h"

namespace omni::model {

tensor::Tensor tap_major_weight(const tensor::Tensor& weight) {
  const int64_t out = weight.dim(0), in = weight.dim(1), k = weight.dim(2);
  tensor::Tensor w = tensor::Tensor::empty({out, k * in}, tensor::DType::kF32);
  const float* src = weight.data<float>();
  float* dst = w.data<float>();
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t c = 0; c < in; ++c) {
      for (int64_t j = 0; j < k; ++j) dst[(o * k + j) * in + c] = src[(o * in + c) * k + j];
    }
  }
  return w;
}

}  // namespace omni::model
