// The CPU backend's float32 matrix product, with one arithmetic order per output element, ours:
//
//   c[i][j] = fma(a[i][K-1], b[K-1][j], ... fma(a[i][1], b[1][j], fma(a[i][0], b[0][j], c0)))
//
// one rounding per step, in k order, from c0 = +0 (or from c[i][j] itself when accumulating). The
// bits of c[i][j] therefore depend on row i of a, column j of b and c0 alone: not on how many rows
// or columns are computed with it or where they sit, not on the thread count (threads split rows
// and columns, never k), and not on the CPU: the AVX-512, AVX2+FMA and scalar (std::fma) paths
// compute the same chains and give the same bits. That is what makes "a row's result does not
// depend on its batch" and "a stream decoded in chunks equals the one-shot decode" hold on every
// x86-64 CPU; a BLAS picks kernels, blockings and summation orders by CPU model and call shape.
//
// gemm.cc says how it is computed (packed panels of b, an outer-product register block per ISA)
// and why every CPU product uses it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace omni::tensor::cpu {

// The instruction-set paths of gemm; each gives the same bits.
enum class Isa { kScalar, kAvx2, kAvx512 };

// "scalar", "avx2" (AVX2 with FMA), "avx512" (AVX-512F).
const char* isa_name(Isa isa);

// The paths this CPU can run, scalar first.
std::vector<Isa> supported_isas();

// The path a name of isa_name() stands for, as OMNI_CPU_ISA gives it. Throws omni::Error naming
// the variable when the name is none of them (kInvalidConfig) or this CPU cannot run it
// (kUnsupported).
Isa parse_isa(std::string_view name);

// The path gemm takes unless told otherwise: the one the environment variable OMNI_CPU_ISA names
// (scalar | avx2 | avx512), read once, on first use; unset or empty, the fastest this CPU runs.
// Throws as parse_isa does.
Isa default_isa();

// c = a · b (accumulate false) or c += a · b (accumulate true), for
//   a: m rows of k floats, row i at a + i * lda;
//   b: element (kk, j) at b + kk * b_k + j * b_n (b_n == 1: row-major [k, n]; b_k == 1: the
//      transpose of a row-major [n, k], e.g. a linear layer's weight; any other strides work too);
//   c: m rows of n floats, row i at c + i * ldc; it must not overlap a or b.
// Runs on the CPU thread pool (tensor/cpu/thread_pool.h), which serialises concurrent callers.
struct GemmOperands {
  const float* a = nullptr;
  int64_t lda = 0;
  const float* b = nullptr;
  int64_t b_k = 0, b_n = 0;
  float* c = nullptr;
  int64_t ldc = 0;
};
void gemm(int64_t m, int64_t n, int64_t k, const GemmOperands& operands, bool accumulate);
void gemm(int64_t m, int64_t n, int64_t k, const GemmOperands& operands, bool accumulate, Isa isa);

}  // namespace omni::tensor::cpu
