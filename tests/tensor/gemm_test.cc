// The CPU gemm's contract (tensor/cpu/gemm.h): every output element is the fma chain over k in
// order, so every instruction-set path this CPU runs gives the bits of that chain written out in
// plain C++, whatever the shape, the layout of b or the rows computed together.
#include "tensor/cpu/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace omni::tensor::cpu {
namespace {

struct Problem {
  int64_t m, n, k;
  int64_t b_k, b_n;  // strides of b
  std::vector<float> a, b, c0;
};

// Values of mixed magnitudes and signs, so that a different order of summation would show.
std::vector<float> random_values(size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-6, 6);
  std::vector<float> v(count);
  for (float& x : v) x = std::ldexp(mantissa(rng), exponent(rng));
  return v;
}

// layout 0: b row-major [k, n]; 1: b is the transpose of a row-major [n, k]; 2: b is column j
// of every third element (a strided view, as conv1d's taps read the weight).
Problem make_problem(int64_t m, int64_t n, int64_t k, int layout, std::mt19937& rng) {
  Problem p{m, n, k, 0, 0, {}, {}, {}};
  p.a = random_values(static_cast<size_t>(m * k), rng);
  p.c0 = random_values(static_cast<size_t>(m * n), rng);
  if (layout == 0) {
    p.b_k = n;
    p.b_n = 1;
    p.b = random_values(static_cast<size_t>(k * n), rng);
  } else if (layout == 1) {
    p.b_k = 1;
    p.b_n = k;
    p.b = random_values(static_cast<size_t>(k * n), rng);
  } else {
    p.b_k = 3;
    p.b_n = 3 * k;
    p.b = random_values(static_cast<size_t>(3 * k * n), rng);
  }
  return p;
}

// The definition: c[i][j] = fma(a[i][k-1], b[k-1][j], ... fma(a[i][0], b[0][j], c0)).
std::vector<float> chain(const Problem& p, bool accumulate) {
  std::vector<float> c(static_cast<size_t>(p.m * p.n));
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      float acc = accumulate ? p.c0[i * p.n + j] : 0.0f;
      for (int64_t kk = 0; kk < p.k; ++kk) acc = std::fma(p.a[i * p.k + kk], p.b[kk * p.b_k + j * p.b_n], acc);
      c[i * p.n + j] = acc;
    }
  }
  return c;
}

std::vector<float> run(const Problem& p, bool accumulate, Isa isa) {
  std::vector<float> c = p.c0;
  GemmOperands op;
  op.a = p.a.data();
  op.lda = p.k;
  op.b = p.b.data();
  op.b_k = p.b_k;
  op.b_n = p.b_n;
  op.c = c.data();
  op.ldc = p.n;
  gemm(p.m, p.n, p.k, op, accumulate, isa);
  return c;
}

TEST(CpuGemmTest, EveryPathGivesTheBitsOfTheFmaChainInKOrder) {
  std::mt19937 rng(11);
  // Row counts around each path's register block (4, 6, 12) and task block (192); column counts
  // around its panel width (8, 16, 32) and task block (256); depths around the k block (256).
  const int64_t ms[] = {1, 5, 12, 13, 200};
  const int64_t ns[] = {1, 17, 33, 300};
  const int64_t ks[] = {1, 7, 256, 300};
  const std::vector<Isa> isas = supported_isas();
  ASSERT_EQ(isas.front(), Isa::kScalar);
  for (int layout = 0; layout < 3; ++layout) {
    for (int64_t m : ms) {
      for (int64_t n : ns) {
        for (int64_t k : ks) {
          const Problem p = make_problem(m, n, k, layout, rng);
          for (bool accumulate : {false, true}) {
            const std::vector<float> want = chain(p, accumulate);
            for (Isa isa : isas) {
              const std::vector<float> got = run(p, accumulate, isa);
              ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
                  << isa_name(isa) << ": m " << m << " n " << n << " k " << k << " layout " << layout << " accumulate "
                  << accumulate;
            }
          }
        }
      }
    }
  }
}

TEST(CpuGemmTest, EmptyDepthGivesZerosOrLeavesTheAccumulatorAlone) {
  std::mt19937 rng(3);
  for (Isa isa : supported_isas()) {
    const Problem p = make_problem(3, 5, 0, 0, rng);
    EXPECT_EQ(run(p, false, isa), std::vector<float>(15, 0.0f)) << isa_name(isa);
    EXPECT_EQ(run(p, true, isa), p.c0) << isa_name(isa);
  }
}

// What the engine relies on: a row's logits do not depend on the rows batched with it.
TEST(CpuGemmTest, LinearRowsEqualTheRowComputedAlone) {
  std::mt19937 rng(5);
  const int64_t rows = 37, in = 300, outs = 70;
  const std::vector<float> xs = random_values(rows * in, rng), ws = random_values(outs * in, rng);
  Tensor x = Tensor::empty({rows, in}, DType::kF32), w = Tensor::empty({outs, in}, DType::kF32);
  std::memcpy(x.raw(), xs.data(), x.nbytes());
  std::memcpy(w.raw(), ws.data(), w.nbytes());
  Tensor all = Tensor::empty({rows, outs}, DType::kF32);
  ops::linear(x, w, Tensor(), all);
  for (int64_t r : {int64_t{0}, int64_t{13}, rows - 1}) {
    Tensor one = Tensor::empty({1, outs}, DType::kF32);
    ops::linear(x.slice_rows(r, r + 1), w, Tensor(), one);
    EXPECT_EQ(std::memcmp(one.raw(), all.slice_rows(r, r + 1).raw(), one.nbytes()), 0) << "row " << r;
  }
}

TEST(CpuGemmTest, TheDefaultPathIsOneThisCpuRuns) {
  const std::vector<Isa> isas = supported_isas();
  EXPECT_NE(std::find(isas.begin(), isas.end(), default_isa()), isas.end()) << isa_name(default_isa());
}

TEST(CpuGemmTest, PathNamesParseAndUnknownOnesAreRefusedByName) {
  EXPECT_EQ(parse_isa("scalar"), Isa::kScalar);
  for (Isa isa : supported_isas()) EXPECT_EQ(parse_isa(isa_name(isa)), isa);
  try {
    parse_isa("sse9");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_NE(std::string(e.what()).find("OMNI_CPU_ISA=sse9: not a CPU path (allowed: scalar, avx2, avx512)"),
              std::string::npos)
        << e.what();
  }
  if (supported_isas().back() != Isa::kAvx512) {
    EXPECT_THROW(parse_isa("avx512"), Error);
  }
}

}  // namespace
}  // namespace omni::tensor::cpu
