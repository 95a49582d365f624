#include <cblas.h>

#include <cstring>

#include "tensor/cpu/kernels.h"

namespace omni::tensor::cpu {

void matmul(const Tensor& a, const Tensor& b, bool transpose_b, Tensor& out) {
  const int m = static_cast<int>(a.dim(0));
  const int k = static_cast<int>(a.dim(1));
  const int n = static_cast<int>(out.dim(1));
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::memset(out.raw(), 0, out.nbytes());
    return;
  }
  if (m == 1) {
    // One token: a matrix-vector product streams the weight once, which is what decode is bound by.
    if (transpose_b) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, b.data<float>(), k, a.data<float>(), 1, 0.0f,
                  out.data<float>(), 1);
    } else {
      cblas_sgemv(CblasRowMajor, CblasTrans, k, n, 1.0f, b.data<float>(), n, a.data<float>(), 1, 0.0f,
                  out.data<float>(), 1);
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a.data<float>(), k,
              b.data<float>(), transpose_b ? k : n, 0.0f, out.data<float>(), n);
}

void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  matmul(x, w, /*transpose_b=*/true, out);
  if (!bias.defined()) return;
  const int64_t m = out.dim(0);
  const int64_t n = out.dim(1);
  const float* b = bias.data<float>();
  float* o = out.data<float>();
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) o[r * n + c] += b[c];
  }
}

}  // namespace omni::tensor::cpu
