// The fused decoder-layer products of ops.h (rms_norm_linear, linear_add, silu_and_mul_linear_add):
// on the CPU they equal the sequence of ops they stand for, bit for bit, and reject bad arguments
// naming the op; on CUDA they give the bits of that sequence for every row count the fused kernel
// takes (1 to kFusedLinearMaxRows, several K that split the norm's sums differently), as well as
// where they fall back to it, in each float dtype, and a replayed recording gives the eager bits.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "tensor/backend.h"
#include "tensor/convert.h"
#include "tensor/device_graph.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace omni::tensor {
namespace {

constexpr float kEps = 1e-6f;

// Normal values rounded to `dtype`, on `device`.
Tensor random_tensor(const Shape& shape, DType dtype, Device device, std::mt19937& rng) {
  Tensor host = Tensor::empty(shape, DType::kF32);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] = normal(rng);
  Tensor typed = Tensor::empty(shape, dtype);
  convert_elements(DType::kF32, host.data<float>(), dtype, typed.raw(), static_cast<size_t>(host.numel()));
  return typed.to(device);
}

Tensor host_tensor(const std::vector<float>& values, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::memcpy(t.data<float>(), values.data(), values.size() * sizeof(float));
  return t;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor host = t.to(Device::cpu());
  const auto* p = static_cast<const uint8_t*>(host.raw());
  return {p, p + host.nbytes()};
}

// The three fused ops and their unfused sequences on one set of operands.
struct Operands {
  Tensor x, norm_weight, w, bias, gate_up, residual;
};

Operands make_operands(int64_t m, int64_t n, int64_t k, DType dtype, Device device, std::mt19937& rng) {
  return {random_tensor({m, k}, dtype, device, rng),     random_tensor({k}, dtype, device, rng),
          random_tensor({n, k}, dtype, device, rng),     random_tensor({n}, dtype, device, rng),
          random_tensor({m, 2 * k}, dtype, device, rng), random_tensor({m, n}, dtype, device, rng)};
}

Tensor fused_norm(const Operands& o) {
  Tensor out = Tensor::empty({o.x.dim(0), o.w.dim(0)}, o.x.dtype(), o.x.device());
  ops::rms_norm_linear(o.x, o.norm_weight, kEps, o.w, o.bias, out);
  return out;
}

Tensor unfused_norm(const Operands& o) {
  Tensor normed = Tensor::empty(o.x.shape(), o.x.dtype(), o.x.device());
  ops::rms_norm(o.x, o.norm_weight, kEps, normed);
  Tensor out = Tensor::empty({o.x.dim(0), o.w.dim(0)}, o.x.dtype(), o.x.device());
  ops::linear(normed, o.w, o.bias, out);
  return out;
}

Tensor fused_add(const Operands& o) {
  Tensor residual = o.residual.to(o.residual.device());
  ops::linear_add(o.x, o.w, residual);
  return residual;
}

Tensor unfused_add(const Operands& o, const Tensor& x) {
  Tensor product = Tensor::empty(o.residual.shape(), o.x.dtype(), o.x.device());
  ops::linear(x, o.w, Tensor(), product);
  Tensor residual = o.residual.to(o.residual.device());
  ops::add(residual, product, residual);
  return residual;
}

Tensor fused_silu(const Operands& o) {
  Tensor residual = o.residual.to(o.residual.device());
  ops::silu_and_mul_linear_add(o.gate_up, o.w, residual);
  return residual;
}

Tensor unfused_silu(const Operands& o) {
  Tensor act = Tensor::empty(o.x.shape(), o.x.dtype(), o.x.device());
  ops::silu_and_mul(o.gate_up, act);
  return unfused_add(o, act);
}

void expect_fused_equals_unfused(const Operands& o, const std::string& where) {
  EXPECT_EQ(bytes_of(fused_norm(o)), bytes_of(unfused_norm(o))) << "rms_norm_linear " << where;
  EXPECT_EQ(bytes_of(fused_add(o)), bytes_of(unfused_add(o, o.x))) << "linear_add " << where;
  EXPECT_EQ(bytes_of(fused_silu(o)), bytes_of(unfused_silu(o))) << "silu_and_mul_linear_add " << where;
}

TEST(FusedLinearTest, CpuEqualsTheUnfusedSequence) {
  std::mt19937 rng(7);
  for (int64_t m : {1, 3, 8, 11}) {
    const Operands o = make_operands(m, 37, 64, DType::kF32, Device::cpu(), rng);
    expect_fused_equals_unfused(o, "m=" + std::to_string(m));
  }
}

TEST(FusedLinearTest, NothingFusesOnTheCpu) {
  std::mt19937 rng(5);
  const Operands o = make_operands(1, 37, 64, DType::kF32, Device::cpu(), rng);
  EXPECT_FALSE(ops::linear_fuses(o.x, o.w, o.residual));
}

TEST(FusedLinearTest, CpuAddsToTheResidualRatherThanOverwritingIt) {
  Tensor x = host_tensor({1.0f, 2.0f}, {1, 2});
  Tensor w = host_tensor({1.0f, 1.0f, 0.5f, -1.0f}, {2, 2});
  Tensor residual = host_tensor({10.0f, 20.0f}, {1, 2});
  ops::linear_add(x, w, residual);
  EXPECT_FLOAT_EQ(residual.data<float>()[0], 13.0f);
  EXPECT_FLOAT_EQ(residual.data<float>()[1], 18.5f);
}

TEST(FusedLinearTest, RejectsMismatchedShapesNamingTheOp) {
  std::mt19937 rng(3);
  const Operands o = make_operands(2, 5, 8, DType::kF32, Device::cpu(), rng);
  Tensor wrong_w = random_tensor({5, 6}, DType::kF32, Device::cpu(), rng);
  Tensor out = Tensor::empty({2, 5}, DType::kF32);
  try {
    ops::rms_norm_linear(o.x, o.norm_weight, kEps, wrong_w, Tensor(), out);
    FAIL() << "expected kInvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("rms_norm_linear"), std::string::npos) << e.what();
  }
  Tensor odd = random_tensor({2, 15}, DType::kF32, Device::cpu(), rng);
  Tensor residual = o.residual;
  try {
    ops::silu_and_mul_linear_add(odd, o.w, residual);
    FAIL() << "expected kInvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("odd"), std::string::npos) << e.what();
  }
  Tensor short_residual = Tensor::empty({2, 4}, DType::kF32);
  EXPECT_THROW(ops::linear_add(o.x, o.w, short_residual), Error);
}

#ifdef OMNI_TEST_EXPECT_CUDA

class FusedLinearCudaTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process";
  }
  std::mt19937 rng_{20261129};
};

// K of 128 chunks (one per norm thread), of 375 (norm threads looping past the block's 256) and past
// 1024 chunks (norm threads summing several chunks each); N odd.
TEST_P(FusedLinearCudaTest, FusedKernelGivesTheBitsOfTheUnfusedSequenceForEveryRowCount) {
  const DType dtype = GetParam();
  const int64_t elems = dtype == DType::kF32 ? 4 : 8;
  for (int64_t chunks : {128, 375, 1125}) {
    for (int64_t m = 1; m <= ops::kFusedLinearMaxRows; ++m) {
      const Operands o = make_operands(m, 333, chunks * elems, dtype, Device::cuda(0), rng_);
      expect_fused_equals_unfused(o, "m=" + std::to_string(m) + " k=" + std::to_string(chunks * elems));
    }
  }
}

TEST_P(FusedLinearCudaTest, FallsBackToTheUnfusedSequenceForMoreRowsOrLargeWeights) {
  const DType dtype = GetParam();
  expect_fused_equals_unfused(make_operands(ops::kFusedLinearMaxRows + 3, 96, 256, dtype, Device::cuda(0), rng_),
                              "past the row limit");
  // 2048 x 2048 is past the weight linear gives the few-row kernel at 8 rows.
  const Operands large = make_operands(8, 2048, 2048, dtype, Device::cuda(0), rng_);
  expect_fused_equals_unfused(large, "large weight");
  // linear_fuses tells the fused kernel from the fallback.
  EXPECT_FALSE(ops::linear_fuses(large.x, large.w, large.residual));
  const Operands many = make_operands(ops::kFusedLinearMaxRows + 3, 96, 256, dtype, Device::cuda(0), rng_);
  EXPECT_FALSE(ops::linear_fuses(many.x, many.w, many.residual));
  const Operands few = make_operands(1, 96, 256, dtype, Device::cuda(0), rng_);
  EXPECT_TRUE(ops::linear_fuses(few.x, few.w, few.residual));
}

TEST_P(FusedLinearCudaTest, AReplayedRecordingGivesTheEagerBitsForRewrittenInputs) {
  const DType dtype = GetParam();
  for (int64_t m : {1, 5, 8}) {
    Operands o = make_operands(m, 1027, 2048, dtype, Device::cuda(0), rng_);
    Tensor normed_out = Tensor::empty({m, 1027}, dtype, Device::cuda(0));
    Tensor residual = Tensor::empty({m, 1027}, dtype, Device::cuda(0));
    const DeviceGraph graph = DeviceGraph::capture(Device::cuda(0), [&] {
      ops::rms_norm_linear(o.x, o.norm_weight, kEps, o.w, o.bias, normed_out);
      ops::linear_add(o.x, o.w, residual);
      ops::silu_and_mul_linear_add(o.gate_up, o.w, residual);
    });
    for (int replay = 0; replay < 2; ++replay) {
      const Operands fresh = make_operands(m, 1027, 2048, dtype, Device::cpu(), rng_);
      ops::upload(fresh.x.to(Device::cpu()), o.x);
      ops::upload(fresh.gate_up.to(Device::cpu()), o.gate_up);
      ops::upload(fresh.residual.to(Device::cpu()), residual);
      ops::upload(fresh.residual.to(Device::cpu()), o.residual);
      graph.replay();
      EXPECT_EQ(bytes_of(normed_out), bytes_of(fused_norm(o))) << "m=" << m << " replay " << replay;
      Tensor eager = fused_add(o);
      ops::silu_and_mul_linear_add(o.gate_up, o.w, eager);
      EXPECT_EQ(bytes_of(residual), bytes_of(eager)) << "m=" << m << " replay " << replay;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedLinearCudaTest, ::testing::Values(DType::kBF16, DType::kF16, DType::kF32),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

#endif

}  // namespace
}  // namespace omni::tensor
