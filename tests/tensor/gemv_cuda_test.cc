// The CUDA matrix-vector kernel behind few-row linear products (cuda/gemv.cu): every row count it
// compiles, odd column counts, K from one chunk to several thousand elements, with and without
// bias, in each float dtype, against a float64 reference; the rule that sends other shapes to
// cuBLASLt; that ops::linear takes it; and that a recording in a DeviceGraph replays the same bits
// on rewritten inputs. Skipped, saying why, in a build without the CUDA backend or without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tensor/backend.h"
#include "tensor/device_graph.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

#ifdef OMNI_TEST_EXPECT_CUDA
#include "tensor/cuda/kernels.h"
#endif

namespace omni::tensor {
namespace {

#ifdef OMNI_TEST_EXPECT_CUDA

// Host values rounded to `dtype`, kept as doubles for the reference and as a device tensor.
struct Operand {
  std::vector<double> values;
  Tensor device;
};

Operand random_operand(const Shape& shape, DType dtype, std::mt19937& rng) {
  Tensor host = Tensor::empty(shape, dtype);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Operand op;
  op.values.resize(host.numel());
  for (int64_t i = 0; i < host.numel(); ++i) {
    const float v = normal(rng);
    if (dtype == DType::kBF16) {
      host.data<uint16_t>()[i] = f32_to_bf16(v);
      op.values[i] = bf16_to_f32(host.data<uint16_t>()[i]);
    } else if (dtype == DType::kF16) {
      host.data<uint16_t>()[i] = f32_to_f16(v);
      op.values[i] = f16_to_f32(host.data<uint16_t>()[i]);
    } else {
      host.data<float>()[i] = v;
      op.values[i] = v;
    }
  }
  op.device = host.to(Device::cuda(0));
  return op;
}

std::vector<double> download(const Tensor& dev) {
  Tensor host = dev.to(Device::cpu());
  std::vector<float> wide(host.numel());
  convert_to_f32(host.dtype(), host.raw(), wide.data(), wide.size());
  return {wide.begin(), wide.end()};
}

std::vector<uint8_t> bytes_of(const Tensor& dev) {
  Tensor host = dev.to(Device::cpu());
  const auto* p = static_cast<const uint8_t*>(host.raw());
  return {p, p + host.nbytes()};
}

// Rounding the float32 sum to the output dtype dominates: a few units in its last place, relative
// to sum |x w| (the scale of the accumulation's own error as well).
double relative_tolerance(DType dtype) {
  if (dtype == DType::kBF16) return 1.0 / 128;
  if (dtype == DType::kF16) return 1.0 / 512;
  return 1e-5;
}

class GemvCudaTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process";
  }

  // out = x w^T (+ bias) through `product`, checked element by element against float64.
  template <typename Product>
  void expect_matches_reference(int m, int n, int k, bool with_bias, Product product) {
    const DType dtype = GetParam();
    const Operand x = random_operand({m, k}, dtype, rng_), w = random_operand({n, k}, dtype, rng_);
    const Operand bias = random_operand({n}, dtype, rng_);
    Tensor out = Tensor::zeros({m, n}, dtype, Device::cuda(0));
    product(x.device, w.device, with_bias ? bias.device : Tensor(), out);
    const std::vector<double> got = download(out);
    const double rtol = relative_tolerance(dtype);
    for (int r = 0; r < m; ++r) {
      for (int c = 0; c < n; ++c) {
        double want = with_bias ? bias.values[c] : 0.0, scale = with_bias ? std::abs(bias.values[c]) : 0.0;
        for (int i = 0; i < k; ++i) {
          want += x.values[r * k + i] * w.values[c * k + i];
          scale += std::abs(x.values[r * k + i] * w.values[c * k + i]);
        }
        ASSERT_LE(std::abs(got[r * n + c] - want), 1e-6 + rtol * scale)
            << "m=" << m << " n=" << n << " k=" << k << " bias=" << with_bias << " at [" << r << ", " << c << "]: got "
            << got[r * n + c] << ", want " << want;
      }
    }
  }

  std::mt19937 rng_{20261129};
};

TEST_P(GemvCudaTest, MatchesTheReferenceForEveryRowCountWithAndWithoutBias) {
  const int chunk = 16 / static_cast<int>(dtype_size(GetParam()));
  struct Shape2 {
    int n, k;
  };
  // One chunk of K; odd N smaller than a block; N that leaves a block part-empty; K long enough
  // that whole blocks of threads split it.
  for (const Shape2 s : {Shape2{1, chunk}, Shape2{7, 3 * chunk}, Shape2{517, 125 * chunk}, Shape2{3, 513 * chunk}}) {
    for (int m = 1; m <= cuda::kGemvMaxRows; ++m) {
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(GetParam())));
        expect_matches_reference(m, s.n, s.k, with_bias,
                                 [](const Tensor& x, const Tensor& w, const Tensor& b, Tensor& out) {
                                   ASSERT_TRUE(cuda::gemv_supports(x, w));
                                   cuda::gemv(x, w, b, out);
                                 });
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_P(GemvCudaTest, LeavesUnchunkedKMisalignedRowsAndTooManyRowsToCublas) {
  const DType dtype = GetParam();
  const int64_t chunk = 16 / static_cast<int64_t>(dtype_size(dtype));
  const Tensor w_odd_k = Tensor::zeros({5, 8 * chunk + 1}, dtype, Device::cuda(0));
  EXPECT_FALSE(cuda::gemv_supports(Tensor::zeros({1, 8 * chunk + 1}, dtype, Device::cuda(0)), w_odd_k));
  const Tensor w = Tensor::zeros({5, 8 * chunk}, dtype, Device::cuda(0));
  const Tensor x_rows = Tensor::zeros({2, 8 * chunk + 1}, dtype, Device::cuda(0));
  // A view that starts one element past a 16-byte boundary.
  const Tensor x_shifted =
      Tensor::borrow(static_cast<char*>(x_rows.raw()) + dtype_size(dtype), {1, 8 * chunk}, dtype, Device::cuda(0));
  EXPECT_FALSE(cuda::gemv_supports(x_shifted, w));
  EXPECT_FALSE(cuda::gemv_supports(Tensor::zeros({cuda::kGemvMaxRows + 1, 8 * chunk}, dtype, Device::cuda(0)), w));
  EXPECT_TRUE(cuda::gemv_supports(Tensor::zeros({cuda::kGemvMaxRows, 8 * chunk}, dtype, Device::cuda(0)), w));
  // ops::linear still computes those through cuBLASLt.
  const auto through_linear = [](const Tensor& x, const Tensor& weight, const Tensor& b, Tensor& out) {
    ops::linear(x, weight, b, out);
  };
  for (int m : {1, 3}) expect_matches_reference(m, 9, static_cast<int>(8 * chunk + 1), true, through_linear);
  expect_matches_reference(cuda::kGemvMaxRows + 3, 33, static_cast<int>(16 * chunk), true, through_linear);
}

TEST_P(GemvCudaTest, LinearAndMatmulTakeTheKernelForOneRow) {
  const DType dtype = GetParam();
  const Operand x = random_operand({1, 1000}, dtype, rng_), w = random_operand({301, 1000}, dtype, rng_);
  const Operand bias = random_operand({301}, dtype, rng_);
  Tensor direct = Tensor::empty({1, 301}, dtype, Device::cuda(0));
  Tensor via_linear = Tensor::empty({1, 301}, dtype, Device::cuda(0));
  Tensor via_matmul = Tensor::empty({1, 301}, dtype, Device::cuda(0));
  cuda::gemv(x.device, w.device, bias.device, direct);
  ops::linear(x.device, w.device, bias.device, via_linear);
  EXPECT_EQ(bytes_of(via_linear), bytes_of(direct));
  if (dtype == DType::kF32) {
    // In float32 the two paths' summation orders show in the last bits, so the equality above
    // tells them apart (16-bit outputs usually round both to the same value).
    Tensor via_cublas = Tensor::empty({1, 301}, dtype, Device::cuda(0));
    cuda::linear_cublas(x.device, w.device, bias.device, via_cublas);
    EXPECT_NE(bytes_of(via_cublas), bytes_of(direct));
  }
  cuda::gemv(x.device, w.device, Tensor(), direct);
  ops::matmul(x.device, w.device, true, via_matmul);
  EXPECT_EQ(bytes_of(via_matmul), bytes_of(direct));
}

TEST_P(GemvCudaTest, AReplayedRecordingGivesTheEagerBitsForRewrittenInputs) {
  const DType dtype = GetParam();
  for (int m : {1, 4}) {
    const int n = 1027, k = 2048;
    const Operand w = random_operand({n, k}, dtype, rng_), bias = random_operand({n}, dtype, rng_);
    Operand x = random_operand({m, k}, dtype, rng_);
    Tensor out = Tensor::empty({m, n}, dtype, Device::cuda(0));
    const DeviceGraph graph =
        DeviceGraph::capture(Device::cuda(0), [&] { ops::linear(x.device, w.device, bias.device, out); });
    for (int replay = 0; replay < 3; ++replay) {
      const Operand fresh = random_operand({m, k}, dtype, rng_);
      ops::upload(fresh.device.to(Device::cpu()), x.device);
      graph.replay();
      Tensor eager = Tensor::empty({m, n}, dtype, Device::cuda(0));
      ops::linear(x.device, w.device, bias.device, eager);
      EXPECT_EQ(bytes_of(out), bytes_of(eager)) << "m=" << m << " replay " << replay;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GemvCudaTest, ::testing::Values(DType::kBF16, DType::kF16, DType::kF32),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

#else

TEST(GemvCudaTest, NeedsTheCudaBackend) { GTEST_SKIP() << "this build has no CUDA backend"; }

#endif

}  // namespace
}  // namespace omni::tensor
