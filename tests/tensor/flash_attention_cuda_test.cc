// The fused bidirectional attention kernel (cuda/dense_flash_attention.cu) against a float64
// reference on the dtype-rounded inputs, in bfloat16 and float16: one key and one query, lengths
// that are and are not multiples of its 128-query and 64-key tiles, more keys than queries and
// fewer, head sizes 64 and 128, softmax rows from flat to peaked (the online rescaling across key
// tiles); the cuBLASLt path on Z-Image's own shape beside it; which operands it takes and that
// ops::attention routes to it. Skipped, saying why, in a build without the CUDA backend or without
// a GPU.
//
// The bound: each output is sum_j p_j v_j / sum_j p_j with the p_j rounded once to the dtype
// (relative error at most u, its unit roundoff: 2^-8 for bfloat16, 2^-11 for float16) and the
// result rounded once more, so |got - exact| <= 2u max|v| whatever the rows look like; the float32
// arithmetic (scores, exp2, sums) adds about 1e-6 of max|v|. Two kernels within that of the exact
// value are within 4u of each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

#ifdef OMNI_TEST_EXPECT_CUDA
#include "tensor/cuda/image_kernels.h"
#endif

namespace omni::tensor {
namespace {

#ifdef OMNI_TEST_EXPECT_CUDA

double unit_roundoff(DType dtype) { return dtype == DType::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }

// Normal values rounded to `dtype`, kept as doubles for the reference and as a device tensor.
struct Operand {
  std::vector<double> values;
  Tensor device;
};

Operand random_operand(const Shape& shape, DType dtype, std::mt19937& rng) {
  Tensor host = Tensor::empty(shape, dtype);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Operand op;
  op.values.resize(static_cast<size_t>(host.numel()));
  for (int64_t i = 0; i < host.numel(); ++i) {
    const float v = normal(rng);
    uint16_t& bits = host.data<uint16_t>()[i];
    bits = dtype == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
    op.values[static_cast<size_t>(i)] = dtype == DType::kBF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
  }
  op.device = host.to(Device::cuda(0));
  return op;
}

std::vector<double> download(const Tensor& dev) {
  Tensor host = dev.to(Device::cpu());
  std::vector<float> wide(static_cast<size_t>(host.numel()));
  convert_to_f32(host.dtype(), host.raw(), wide.data(), wide.size());
  return {wide.begin(), wide.end()};
}

// Rows `rows` of out [s, heads, d] = softmax(q k^T * scale) v per head, in float64, as
// [rows.size(), heads, d].
std::vector<double> reference(const Operand& q, const Operand& k, const Operand& v, const std::vector<int64_t>& rows,
                              int64_t skv, int64_t heads, int64_t d, double scale) {
  std::vector<double> out(rows.size() * static_cast<size_t>(heads * d), 0.0), p(static_cast<size_t>(skv));
  for (int64_t h = 0; h < heads; ++h) {
    for (size_t r = 0; r < rows.size(); ++r) {
      const int64_t i = rows[r];
      const double* qi = &q.values[static_cast<size_t>((i * heads + h) * d)];
      double mx = -INFINITY;
      for (int64_t j = 0; j < skv; ++j) {
        const double* kj = &k.values[static_cast<size_t>((j * heads + h) * d)];
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += qi[c] * kj[c];
        p[static_cast<size_t>(j)] = dot * scale;
        mx = std::max(mx, dot * scale);
      }
      double total = 0;
      for (double& e : p) total += (e = std::exp(e - mx));
      double* oi = &out[(r * static_cast<size_t>(heads) + static_cast<size_t>(h)) * static_cast<size_t>(d)];
      for (int64_t j = 0; j < skv; ++j) {
        const double* vj = &v.values[static_cast<size_t>((j * heads + h) * d)];
        const double w = p[static_cast<size_t>(j)] / total;
        for (int64_t c = 0; c < d; ++c) oi[c] += w * vj[c];
      }
    }
  }
  return out;
}

std::vector<int64_t> all_rows(int64_t s) {
  std::vector<int64_t> rows(static_cast<size_t>(s));
  for (int64_t i = 0; i < s; ++i) rows[static_cast<size_t>(i)] = i;
  return rows;
}

// The entries of rows `rows` of x [s, heads, d].
std::vector<double> pick_rows(const std::vector<double>& x, const std::vector<int64_t>& rows, int64_t heads,
                              int64_t d) {
  std::vector<double> out;
  for (int64_t i : rows) {
    const auto first = x.begin() + i * heads * d;
    out.insert(out.end(), first, first + heads * d);
  }
  return out;
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double e : x) m = std::max(m, std::abs(e));
  return m;
}

// OMNI_OPS_TEST_REPORT=1 prints each comparison's error (scripts/gpu/run_flash_attention_on_gpu.sh sets it).
void report(const std::string& what, double error, double bound) {
  if (std::getenv("OMNI_OPS_TEST_REPORT") != nullptr) {
    std::printf("[error] flash %s: %.3g of max|v|, %.2f of the bound\n", what.c_str(), error, error / bound);
  }
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

class FlashAttentionCudaTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process";
  }
  DType dtype() const { return GetParam(); }
};

TEST_P(FlashAttentionCudaTest, MatchesTheFloat64ReferenceWithinTwoRoundings) {
  struct Case {
    int64_t s, skv, heads, d;
    double sharpness;  // scale = sharpness / sqrt(d): logits of standard deviation `sharpness`
  };
  const Case cases[] = {
      {1, 1, 1, 128, 1.0},       {1, 200, 2, 64, 1.0},   {37, 45, 3, 128, 1.0},    {128, 64, 1, 128, 1.0},
      {129, 65, 2, 128, 3.0},    {130, 200, 2, 64, 3.0}, {300, 1000, 2, 128, 3.0}, {256, 700, 1, 128, 8.0},
      {1056, 1100, 2, 128, 1.0}, {500, 37, 4, 64, 0.1},
  };
  std::mt19937 rng(24);
  const double bound = 2 * unit_roundoff(dtype()) + 1e-5;
  for (const Case& c : cases) {
    const Operand q = random_operand({c.s, c.heads, c.d}, dtype(), rng);
    const Operand k = random_operand({c.skv, c.heads, c.d}, dtype(), rng);
    const Operand v = random_operand({c.skv, c.heads, c.d}, dtype(), rng);
    const float scale = static_cast<float>(c.sharpness / std::sqrt(static_cast<double>(c.d)));
    Tensor out = Tensor::empty({c.s, c.heads, c.d}, dtype(), Device::cuda(0));
    ASSERT_TRUE(cuda::flash_attention_supports(q.device, k.device, v.device, scale, out));
    cuda::flash_attention(q.device, k.device, v.device, scale, out);
    const std::vector<double> got = download(out);
    const std::vector<double> want = reference(q, k, v, all_rows(c.s), c.skv, c.heads, c.d, scale);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(std::isfinite(got[i])) << "element " << i;
    const std::string what = std::string(dtype_name(dtype())) + " s=" + std::to_string(c.s) +
                             " skv=" + std::to_string(c.skv) + " heads=" + std::to_string(c.heads) +
                             " d=" + std::to_string(c.d) + " sharpness=" + std::to_string(c.sharpness);
    const double error = max_diff(got, want) / max_abs(v.values);
    report(what, error, bound);
    EXPECT_LE(error, bound) << what;
  }
}

TEST_P(FlashAttentionCudaTest, AgreesWithTheCublasPathOnZImagesShape) {
  // 4096 image tokens and 32 caption tokens, 30 heads of 128 (Z-Image-Turbo at 1024x1024).
  const int64_t s = 4128, heads = 30, d = 128;
  std::mt19937 rng(4128);
  const Operand q = random_operand({s, heads, d}, dtype(), rng), k = random_operand({s, heads, d}, dtype(), rng);
  const Operand v = random_operand({s, heads, d}, dtype(), rng);
  const float scale = 3.0f / std::sqrt(static_cast<float>(d));
  Tensor fused = Tensor::empty({s, heads, d}, dtype(), Device::cuda(0));
  Tensor materialised = Tensor::empty({s, heads, d}, dtype(), Device::cuda(0));
  cuda::flash_attention(q.device, k.device, v.device, scale, fused);
  cuda::materialised_attention(q.device, k.device, v.device, scale, materialised);
  const std::vector<double> a = download(fused), b = download(materialised);
  const double u = unit_roundoff(dtype()), v_max = max_abs(v.values);
  const std::string at = std::string(dtype_name(dtype())) + " S=4128 30x128";
  report("against cuBLASLt " + at, max_diff(a, b) / v_max, 4 * u + 1e-5);
  EXPECT_LE(max_diff(a, b) / v_max, 4 * u + 1e-5);
  // Against float64 on rows from each end, the tile edges and the caption (all 30 heads each).
  const std::vector<int64_t> rows = {0, 1, 127, 128, 2047, 3071, 4095, 4096, 4100, 4127};
  const std::vector<double> want = reference(q, k, v, rows, s, heads, d, scale);
  const double fused_error = max_diff(pick_rows(a, rows, heads, d), want) / v_max;
  const double materialised_error = max_diff(pick_rows(b, rows, heads, d), want) / v_max;
  report("fused against float64 " + at, fused_error, 2 * u + 1e-5);
  report("cuBLASLt against float64 " + at, materialised_error, 2 * u + 1e-5);
  EXPECT_LE(fused_error, 2 * u + 1e-5);
  EXPECT_LE(materialised_error, 2 * u + 1e-5);
  // Not the same values: the two round the probabilities at different points.
  EXPECT_GT(max_diff(a, b), 0.0);
}

TEST_P(FlashAttentionCudaTest, TakesSixteenBitHeadsOf64And128AndOpsAttentionRoutesThere) {
  auto make = [&](Shape shape, DType dt) { return Tensor::zeros(std::move(shape), dt, Device::cuda(0)); };
  const Tensor q = make({70, 2, 128}, dtype()), k = make({90, 2, 128}, dtype()), v = make({90, 2, 128}, dtype());
  Tensor out = make({70, 2, 128}, dtype());
  EXPECT_TRUE(cuda::flash_attention_supports(q, k, v, 0.1f, out));
  EXPECT_FALSE(cuda::flash_attention_supports(q, k, v, 0.0f, out));
  EXPECT_FALSE(cuda::flash_attention_supports(q, k, v, -0.1f, out));
  EXPECT_FALSE(cuda::flash_attention_supports(q, k, v, INFINITY, out));
  EXPECT_THROW(cuda::flash_attention(q, k, v, 0.0f, out), Error);
  const Tensor wide = make({70, 1, 512}, dtype()), narrow = make({70, 4, 32}, dtype());
  EXPECT_FALSE(cuda::flash_attention_supports(wide, wide, wide, 0.1f, wide));
  EXPECT_FALSE(cuda::flash_attention_supports(narrow, narrow, narrow, 0.1f, narrow));
  const Tensor f32 = make({70, 2, 128}, DType::kF32);
  EXPECT_FALSE(cuda::flash_attention_supports(f32, f32, f32, 0.1f, f32));
  // A view starting 8 bytes into its buffer is not 16-byte aligned.
  const Tensor buffer = make({70 * 2 * 128 + 4}, dtype());
  const Tensor shifted = buffer.slice_rows(4, 4 + 70 * 2 * 128).reshape({70, 2, 128});
  EXPECT_FALSE(cuda::flash_attention_supports(shifted, k, v, 0.1f, out));

  // ops::attention gives the kernel's bits on operands it takes, and the cuBLASLt path's on others.
  std::mt19937 rng(7);
  const Operand rq = random_operand({70, 2, 128}, dtype(), rng), rk = random_operand({90, 2, 128}, dtype(), rng);
  const Operand rv = random_operand({90, 2, 128}, dtype(), rng);
  Tensor through_op = make({70, 2, 128}, dtype()), direct = make({70, 2, 128}, dtype());
  ops::attention(rq.device, rk.device, rv.device, 0.2f, through_op);
  cuda::flash_attention(rq.device, rk.device, rv.device, 0.2f, direct);
  EXPECT_EQ(download(through_op), download(direct));
  const Operand nq = random_operand({70, 4, 32}, dtype(), rng), nk = random_operand({90, 4, 32}, dtype(), rng);
  const Operand nv = random_operand({90, 4, 32}, dtype(), rng);
  Tensor narrow_op = make({70, 4, 32}, dtype()), narrow_direct = make({70, 4, 32}, dtype());
  ops::attention(nq.device, nk.device, nv.device, 0.2f, narrow_op);
  cuda::materialised_attention(nq.device, nk.device, nv.device, 0.2f, narrow_direct);
  EXPECT_EQ(download(narrow_op), download(narrow_direct));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FlashAttentionCudaTest, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

#else

TEST(FlashAttentionCudaTest, NeedsTheCudaBackend) { GTEST_SKIP() << "this build has no CUDA backend"; }

#endif

}  // namespace
}  // namespace omni::tensor
