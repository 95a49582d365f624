// Speed of the CPU backend's fixed-order float32 product (tensor/cpu/gemm.h) against OpenBLAS in
// the same run (docs/performance.md, "Fixed-order CPU matrix products"): for each shape, GFLOP/s
// of cblas_sgemm (cblas_sgemv for one row, as the backend called it before) and of gemm on every
// path this CPU runs, best of --repeat timed calls after one untimed call. "t" shapes multiply by
// the transpose of a row-major [n, k] (a linear layer's weight), "n" shapes by a row-major [k, n].
//   build/bench/gemm_bench [--repeat 5] [--shapes decode|all]
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "tensor/cpu/gemm.h"
#include "tensor/cpu/thread_pool.h"

namespace {

namespace cpu = omni::tensor::cpu;
using Clock = std::chrono::steady_clock;

struct Shape {
  const char* what;
  int64_t m, n, k;
  bool transpose_b;
};

template <typename F>
double best_seconds(int repeat, F&& f) {
  f();
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    const auto start = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

void openblas(const Shape& s, const float* a, const float* b, float* c) {
  const int m = static_cast<int>(s.m), n = static_cast<int>(s.n), k = static_cast<int>(s.k);
  if (m == 1) {
    if (s.transpose_b) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, b, k, a, 1, 0.0f, c, 1);
    } else {
      cblas_sgemv(CblasRowMajor, CblasTrans, k, n, 1.0f, b, n, a, 1, 0.0f, c, 1);
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, s.transpose_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, k, b,
              s.transpose_b ? k : n, 0.0f, c, n);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Fixed-order CPU gemm against OpenBLAS"};
  int repeat = 5;
  std::string which = "all";
  app.add_option("--repeat", repeat, "timed calls per measurement (the best is reported)")->check(CLI::PositiveNumber);
  app.add_option("--shapes", which, "decode (one and eight rows) or all")->check(CLI::IsMember({"decode", "all"}));
  CLI11_PARSE(app, argc, argv);

  // Qwen3-0.6B's decode and prefill products (hidden 1024, MLP 3072), the released codec
  // decoder's (hidden 512, decoder_dim 1536; its upsampling convolutions multiply by [k, n]).
  std::vector<Shape> shapes = {
      {"decode qkv", 1, 4096, 1024, true},      {"decode mlp up", 1, 6144, 1024, true},
      {"decode mlp down", 1, 1024, 3072, true}, {"8 rows mlp up", 8, 6144, 1024, true},
      {"8 rows mlp down", 8, 1024, 3072, true},
  };
  if (which == "all") {
    shapes.insert(shapes.end(), {
                                    {"prefill 128 mlp up", 128, 6144, 1024, true},
                                    {"prefill 512 qkv", 512, 4096, 1024, true},
                                    {"codec transformer", 250, 1536, 512, true},
                                    {"codec conv tap", 400, 1536, 1536, true},
                                    {"codec upsample", 400, 12288, 1536, false},
                                });
  }
  std::printf("OpenBLAS %s, %d threads; gemm paths:", openblas_get_config(), openblas_get_num_threads());
  const std::vector<cpu::Isa> isas = cpu::supported_isas();
  for (cpu::Isa isa : isas) std::printf(" %s", cpu::isa_name(isa));
  std::printf("; pool threads %d\n", cpu::thread_count());
  std::printf("| shape | m x n x k | OpenBLAS GFLOP/s |");
  for (cpu::Isa isa : isas) std::printf(" gemm %s GFLOP/s |", cpu::isa_name(isa));
  std::printf("\n|---|---|---|");
  for (size_t i = 0; i < isas.size(); ++i) std::printf("---|");
  std::printf("\n");

  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const Shape& s : shapes) {
    std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n)),
        c(static_cast<size_t>(s.m * s.n));
    for (float& v : a) v = dist(rng);
    for (float& v : b) v = dist(rng);
    const double flop = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    const double blas = best_seconds(repeat, [&] { openblas(s, a.data(), b.data(), c.data()); });
    std::printf("| %s (%s) | %lld x %lld x %lld | %.1f |", s.what, s.transpose_b ? "t" : "n",
                static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k),
                flop / blas * 1e-9);
    cpu::GemmOperands op;
    op.a = a.data();
    op.lda = s.k;
    op.b = b.data();
    op.b_k = s.transpose_b ? 1 : s.n;
    op.b_n = s.transpose_b ? s.k : 1;
    op.c = c.data();
    op.ldc = s.n;
    for (cpu::Isa isa : isas) {
      // The scalar path is a fallback for CPUs without AVX2; time it only on small shapes.
      if (isa == cpu::Isa::kScalar && flop > 2e9) {
        std::printf(" - |");
        continue;
      }
      const double ours = best_seconds(repeat, [&] { cpu::gemm(s.m, s.n, s.k, op, false, isa); });
      std::printf(" %.1f |", flop / ours * 1e-9);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}
