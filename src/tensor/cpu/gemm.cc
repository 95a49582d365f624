// How gemm (gemm.h) computes its fixed-order chains, fast.
//
// b is packed, one block of kDepth k-steps at a time, into panels of nr columns stored k-major
// ([kb][nr], zero past the last column). A microkernel holds an mr x nr block of c in registers:
// per k it loads one row of the panel (nr floats), broadcasts a[i][k] for each of its mr rows and
// does mr * nr / width vector FMAs, each one step of nr chains. Vectorising across columns keeps
// every chain in k order whatever the vector width, so each path's blocking is its own (AVX-512:
// 12 x 32 in 24 zmm accumulators; AVX2: 6 x 16 in 12 ymm; scalar: 4 x 8 with std::fma) and the
// bits are the same. Between k blocks the accumulators go to c and come back: float32 stored and
// reloaded is exact. Edges: fewer rows take a microkernel instantiated for that row count, fewer
// columns a masked load and store (the panel's padding is zero and never stored).
//
// Work is split into tasks of up to kRowBlock rows x kColBlock columns (narrower when there are
// few, so both threads get some), each packing its own columns of b; threads take whole tasks.
//
// Why every CPU float32 product uses this rather than OpenBLAS (measured on the 2-core Sapphire
// Rapids development VM, bench/gemm_bench.cc, docs/performance.md "Fixed-order CPU matrix
// products"): OpenBLAS's results depend on the CPU model it detects and on the call's shape, so
// neither "batched equals alone" (the AR engine, the talker) nor "chunked equals one-shot" (the
// codec decoder) could hold across machines with it, and keeping it for some products only would
// let a row's path change with its batch. This kernel is faster than OpenBLAS for a few rows,
// within 0.7-1x of it for large products, and about 0.65x for one row (decode at batch 1: the
// weight is transposed into panels, 8 x 8 in registers); the CPU backend (tests, CI, small
// models) can afford that for exactness.
#include "tensor/cpu/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "base/error.h"
#include "tensor/cpu/thread_pool.h"

namespace omni::tensor::cpu {
namespace {

constexpr int64_t kDepth = 256;     // k-steps per packed block: an AVX-512 panel is 32 KiB
constexpr int64_t kRowBlock = 192;  // rows per task, a multiple of every path's mr
constexpr int64_t kColBlock = 256;  // columns per task, a multiple of every path's nr
constexpr int kMaxRows = 12;        // the largest mr

// c[0..rows)[0..cols) (+)= a[0..rows)[0..kb) · panel, where panel is [kb][nr] and rows is the
// instantiation's; load: start from c (accumulate, or a later k block), else from +0.
using Microkernel = void (*)(const float* a, int64_t lda, const float* panel, int64_t kb, float* c, int64_t ldc,
                             int64_t cols, bool load);

using PackPanel = void (*)(const GemmOperands& op, int64_t k0, int64_t kb, int64_t j0, int64_t cols, int64_t nr,
                           float* dst);

struct Kernel {
  int mr = 0, nr = 0;
  PackPanel pack = nullptr;
  Microkernel rows[kMaxRows + 1] = {};  // rows[r]: the microkernel for r rows, 1 <= r <= mr
};

// --- packing b ------------------------------------------------------------------------------------
// Pure data movement, so how a path packs cannot change a bit of the product.

// dst[kk][jj] = b(k0 + kk, j0 + jj) for kk < kb, jj < cols; zero for cols <= jj < nr.
void pack_panel(const GemmOperands& op, int64_t k0, int64_t kb, int64_t j0, int64_t cols, int64_t nr, float* dst) {
  if (cols < nr) {
    for (int64_t kk = 0; kk < kb; ++kk) std::fill(dst + kk * nr + cols, dst + (kk + 1) * nr, 0.0f);
  }
  if (op.b_n == 1) {
    for (int64_t kk = 0; kk < kb; ++kk) {
      std::memcpy(dst + kk * nr, op.b + (k0 + kk) * op.b_k + j0, static_cast<size_t>(cols) * sizeof(float));
    }
    return;
  }
  for (int64_t jj = 0; jj < cols; ++jj) {
    const float* src = op.b + (j0 + jj) * op.b_n + k0 * op.b_k;
    for (int64_t kk = 0; kk < kb; ++kk) dst[kk * nr + jj] = src[kk * op.b_k];
  }
}

// Four floats at p in the low lane, four at p + apart in the high one.
__attribute__((target("avx2"))) __m256 halves(const float* p, int64_t apart) {
  return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)), _mm_loadu_ps(p + apart), 1);
}

// pack_panel for b the transpose of a row-major matrix (b_k == 1: a linear layer's weight, what
// decode's matrix-vector products read), 8 x 8 blocks transposed in registers.
__attribute__((target("avx2"))) void pack_panel_avx2(const GemmOperands& op, int64_t k0, int64_t kb, int64_t j0,
                                                     int64_t cols, int64_t nr, float* dst) {
  if (op.b_k != 1) {
    pack_panel(op, k0, kb, j0, cols, nr, dst);
    return;
  }
  const int64_t full_cols = cols / 8 * 8, full_k = kb / 8 * 8;
  for (int64_t jj = 0; jj < full_cols; jj += 8) {
    const float* row = op.b + (j0 + jj) * op.b_n + k0;
    const int64_t ld = op.b_n;
    for (int64_t kk = 0; kk < full_k; kk += 8) {
      const float* src = row + kk;
      // Lane 0 holds rows 0-3, lane 1 rows 4-7; within lanes, unpack and shuffle make columns.
      for (int at = 0; at < 8; at += 4) {
        const __m256 r0 = halves(src + at, ld * 4), r1 = halves(src + ld + at, ld * 4);
        const __m256 r2 = halves(src + 2 * ld + at, ld * 4), r3 = halves(src + 3 * ld + at, ld * 4);
        const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
        const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
        float* out = dst + (kk + at) * nr + jj;
        _mm256_storeu_ps(out, _mm256_shuffle_ps(t0, t2, 0x44));
        _mm256_storeu_ps(out + nr, _mm256_shuffle_ps(t0, t2, 0xEE));
        _mm256_storeu_ps(out + 2 * nr, _mm256_shuffle_ps(t1, t3, 0x44));
        _mm256_storeu_ps(out + 3 * nr, _mm256_shuffle_ps(t1, t3, 0xEE));
      }
    }
    for (int64_t j = jj; j < jj + 8; ++j) {
      for (int64_t kk = full_k; kk < kb; ++kk) dst[kk * nr + j] = row[(j - jj) * ld + kk];
    }
  }
  for (int64_t jj = full_cols; jj < nr; ++jj) {
    const float* src = op.b + (j0 + jj) * op.b_n + k0;
    for (int64_t kk = 0; kk < kb; ++kk) dst[kk * nr + jj] = jj < cols ? src[kk] : 0.0f;
  }
}

// --- scalar: std::fma, one rounding per step like the FMA instructions ---------------------------

constexpr int kScalarNr = 8;

template <int R>
void micro_scalar(const float* a, int64_t lda, const float* panel, int64_t kb, float* c, int64_t ldc, int64_t cols,
                  bool load) {
  float acc[R][kScalarNr];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < kScalarNr; ++j) acc[r][j] = load && j < cols ? c[r * ldc + j] : 0.0f;
  }
  for (int64_t kk = 0; kk < kb; ++kk) {
    const float* p = panel + kk * kScalarNr;
    for (int r = 0; r < R; ++r) {
      const float av = a[r * lda + kk];
      for (int j = 0; j < kScalarNr; ++j) acc[r][j] = std::fma(av, p[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < cols; ++j) c[r * ldc + j] = acc[r][j];
  }
}

// --- AVX2 + FMA: 16 columns in two ymm per row ----------------------------------------------------

constexpr int kAvx2Nr = 16;

template <int R>
__attribute__((target("avx2,fma"))) void micro_avx2(const float* a, int64_t lda, const float* panel, int64_t kb,
                                                    float* c, int64_t ldc, int64_t cols, bool load) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i mask0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(cols)), lane);
  const __m256i mask1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(cols) - 8), lane);
  __m256 acc0[R], acc1[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    acc0[r] = load ? _mm256_maskload_ps(c + r * ldc, mask0) : _mm256_setzero_ps();
    acc1[r] = load ? _mm256_maskload_ps(c + r * ldc + 8, mask1) : _mm256_setzero_ps();
  }
  for (int64_t kk = 0; kk < kb; ++kk) {
    const __m256 b0 = _mm256_loadu_ps(panel + kk * kAvx2Nr);
    const __m256 b1 = _mm256_loadu_ps(panel + kk * kAvx2Nr + 8);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * lda + kk);
      acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    _mm256_maskstore_ps(c + r * ldc, mask0, acc0[r]);
    _mm256_maskstore_ps(c + r * ldc + 8, mask1, acc1[r]);
  }
}

// --- AVX-512F: 32 columns in two zmm per row ------------------------------------------------------

constexpr int kAvx512Nr = 32;

__mmask16 first_lanes(int64_t n) {
  if (n <= 0) return 0;
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

template <int R>
__attribute__((target("avx512f"))) void micro_avx512(const float* a, int64_t lda, const float* panel, int64_t kb,
                                                     float* c, int64_t ldc, int64_t cols, bool load) {
  const __mmask16 mask0 = first_lanes(cols), mask1 = first_lanes(cols - 16);
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    acc0[r] = load ? _mm512_maskz_loadu_ps(mask0, c + r * ldc) : _mm512_setzero_ps();
    acc1[r] = load ? _mm512_maskz_loadu_ps(mask1, c + r * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t kk = 0; kk < kb; ++kk) {
    const __m512 b0 = _mm512_loadu_ps(panel + kk * kAvx512Nr);
    const __m512 b1 = _mm512_loadu_ps(panel + kk * kAvx512Nr + 16);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + kk]);
      acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, mask0, acc0[r]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, mask1, acc1[r]);
  }
}

template <template <int> class Micro, int... R>
Kernel make_kernel(int nr, PackPanel pack, std::integer_sequence<int, R...> /*rows*/) {
  Kernel kernel;
  kernel.pack = pack;
  kernel.mr = static_cast<int>(sizeof...(R));
  kernel.nr = nr;
  ((kernel.rows[R + 1] = &Micro<R + 1>::run), ...);
  return kernel;
}

template <int R>
struct ScalarMicro {
  static void run(const float* a, int64_t lda, const float* panel, int64_t kb, float* c, int64_t ldc, int64_t cols,
                  bool load) {
    micro_scalar<R>(a, lda, panel, kb, c, ldc, cols, load);
  }
};
template <int R>
struct Avx2Micro {
  static void run(const float* a, int64_t lda, const float* panel, int64_t kb, float* c, int64_t ldc, int64_t cols,
                  bool load) {
    micro_avx2<R>(a, lda, panel, kb, c, ldc, cols, load);
  }
};
template <int R>
struct Avx512Micro {
  static void run(const float* a, int64_t lda, const float* panel, int64_t kb, float* c, int64_t ldc, int64_t cols,
                  bool load) {
    micro_avx512<R>(a, lda, panel, kb, c, ldc, cols, load);
  }
};

const Kernel& kernel_for(Isa isa) {
  static const Kernel kScalar = make_kernel<ScalarMicro>(kScalarNr, &pack_panel, std::make_integer_sequence<int, 4>());
  static const Kernel kAvx2 = make_kernel<Avx2Micro>(kAvx2Nr, &pack_panel_avx2, std::make_integer_sequence<int, 6>());
  static const Kernel kAvx512 =
      make_kernel<Avx512Micro>(kAvx512Nr, &pack_panel_avx2, std::make_integer_sequence<int, kMaxRows>());
  switch (isa) {
    case Isa::kAvx512:
      return kAvx512;
    case Isa::kAvx2:
      return kAvx2;
    case Isa::kScalar:
      break;
  }
  return kScalar;
}

// Rows [i0, i1) x columns [j0, j1) of c, over all of k: per k block and panel of b, the panel is
// packed (it stays in L1) and every row block of the task runs over it.
void run_task(const Kernel& kernel, const GemmOperands& op, int64_t k, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
              bool accumulate, std::vector<float>& panel) {
  const int64_t nr = kernel.nr;
  panel.resize(static_cast<size_t>(nr * std::min(k, kDepth)));
  for (int64_t k0 = 0; k0 < k; k0 += kDepth) {
    const int64_t kb = std::min(kDepth, k - k0);
    const bool load = accumulate || k0 > 0;
    for (int64_t j = j0; j < j1; j += nr) {
      const int64_t cols = std::min(nr, j1 - j);
      kernel.pack(op, k0, kb, j, cols, nr, panel.data());
      for (int64_t i = i0; i < i1; i += kernel.mr) {
        const Microkernel micro = kernel.rows[std::min<int64_t>(kernel.mr, i1 - i)];
        micro(op.a + i * op.lda + k0, op.lda, panel.data(), kb, op.c + i * op.ldc + j, op.ldc, cols, load);
      }
    }
  }
}

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

bool cpu_runs(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f");
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kScalar:
      break;
  }
  return true;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kScalar:
      break;
  }
  return "scalar";
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (cpu_runs(isa)) isas.push_back(isa);
  }
  return isas;
}

Isa parse_isa(std::string_view name) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (name != isa_name(isa)) continue;
    if (!cpu_runs(isa)) {
      std::string runs;
      for (Isa s : supported_isas()) runs += std::string(runs.empty() ? "" : ", ") + isa_name(s);
      throw_error(ErrorCode::kUnsupported, "OMNI_CPU_ISA={}: this CPU cannot run that path (it runs: {})", name, runs);
    }
    return isa;
  }
  throw_error(ErrorCode::kInvalidConfig, "OMNI_CPU_ISA={}: not a CPU path (allowed: scalar, avx2, avx512)", name);
}

Isa default_isa() {
  static const Isa kIsa = [] {
    const char* env = std::getenv("OMNI_CPU_ISA");
    return env == nullptr || *env == '\0' ? supported_isas().back() : parse_isa(env);
  }();
  return kIsa;
}

void gemm(int64_t m, int64_t n, int64_t k, const GemmOperands& operands, bool accumulate) {
  gemm(m, n, k, operands, accumulate, default_isa());
}

void gemm(int64_t m, int64_t n, int64_t k, const GemmOperands& operands, bool accumulate, Isa isa) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (accumulate) return;
    for (int64_t i = 0; i < m; ++i) std::fill(operands.c + i * operands.ldc, operands.c + i * operands.ldc + n, 0.0f);
    return;
  }
  const Kernel& kernel = kernel_for(isa);
  // Narrower tasks while there are fewer than two per thread: first fewer columns (decode's few
  // rows), then fewer rows.
  const int64_t want = int64_t{2} * thread_count();
  int64_t row_block = std::min(kRowBlock, round_up(m, kernel.mr));
  int64_t col_block = std::min(kColBlock, round_up(n, kernel.nr));
  auto tasks = [&] { return ((m + row_block - 1) / row_block) * ((n + col_block - 1) / col_block); };
  while (tasks() < want && col_block > kernel.nr) col_block = round_up(col_block / 2, kernel.nr);
  while (tasks() < want && row_block > kernel.mr) row_block = round_up(row_block / 2, kernel.mr);
  const int64_t col_tasks = (n + col_block - 1) / col_block;
  // Products too small to pay for waking the pool run on the calling thread.
  const int64_t grain = m * n * k < (int64_t{1} << 18) ? tasks() : 1;
  parallel_for(tasks(), grain, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> panel;
    for (int64_t t = begin; t < end; ++t) {
      const int64_t i0 = (t / col_tasks) * row_block, j0 = (t % col_tasks) * col_block;
      run_task(kernel, operands, k, i0, std::min(m, i0 + row_block), j0, std::min(n, j0 + col_block), accumulate,
               panel);
    }
  });
}

}  // namespace omni::tensor::cpu
