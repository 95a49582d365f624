// Every CPU float32 product goes through gemm (gemm.h): one fixed arithmetic order per output
// element, so a row's result never depends on the rows batched with it, nor on the CPU.
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/kernels.h"

namespace omni::tensor::cpu {

void matmul(const Tensor& a, const Tensor& b, bool transpose_b, Tensor& out) {
  const int64_t k = a.dim(1), n = out.dim(1);
  GemmOperands op;
  op.a = a.data<float>();
  op.lda = k;
  op.b = b.data<float>();
  op.b_k = transpose_b ? 1 : n;
  op.b_n = transpose_b ? k : 1;
  op.c = out.data<float>();
  op.ldc = n;
  gemm(a.dim(0), n, k, op, /*accumulate=*/false);
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
