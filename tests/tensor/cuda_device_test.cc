// The CUDA device model: host<->device copies and the caching allocator. Skipped, saying why, in
// a build without the CUDA backend or on a machine without a GPU.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "base/error.h"
#include "tensor/backend.h"
#include "tensor/tensor.h"

#ifdef OMNI_TEST_EXPECT_CUDA
#include "tensor/cuda/allocator.h"
#endif

namespace omni::tensor {
namespace {

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef OMNI_TEST_EXPECT_CUDA
    GTEST_SKIP() << "this build has no CUDA backend";
#endif
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process";
  }
};

TEST_F(CudaDeviceTest, CopiesRoundTripThroughTheDeviceBitForBit) {
  Tensor host = Tensor::empty({3, 1001}, DType::kI32);
  std::iota(host.data<int32_t>(), host.data<int32_t>() + host.numel(), -500);
  Tensor on_gpu = host.to(Device::cuda(0));
  EXPECT_EQ(on_gpu.device(), Device::cuda(0));
  EXPECT_EQ(on_gpu.shape(), host.shape());
  Tensor copy_on_gpu = on_gpu.to(Device::cuda(0));
  Tensor back = copy_on_gpu.to(Device::cpu());
  ASSERT_EQ(back.device(), Device::cpu());
  EXPECT_EQ(std::vector<int32_t>(back.data<int32_t>(), back.data<int32_t>() + back.numel()),
            std::vector<int32_t>(host.data<int32_t>(), host.data<int32_t>() + host.numel()));
}

TEST_F(CudaDeviceTest, ZerosAreZeroOnTheDevice) {
  Tensor z = Tensor::zeros({4097}, DType::kF32, Device::cuda(0)).to(Device::cpu());
  for (int64_t i = 0; i < z.numel(); ++i) ASSERT_EQ(z.data<float>()[i], 0.0f) << "element " << i;
}

#ifdef OMNI_TEST_EXPECT_CUDA
TEST_F(CudaDeviceTest, FreedBlocksAreReusedForTheSameRoundedSize) {
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({1000}, DType::kF32, Device::cuda(0));
    first = t.raw();
  }
  const size_t cached = cuda::DeviceAllocator::cached_bytes(0);
  EXPECT_GE(cached, 4000u);
  // 3996 bytes round to the same 4096-byte block, which the cache hands back.
  Tensor same = Tensor::empty({999}, DType::kF32, Device::cuda(0));
  EXPECT_EQ(same.raw(), first);
  EXPECT_LT(cuda::DeviceAllocator::cached_bytes(0), cached);
}

TEST_F(CudaDeviceTest, AFreedLargerBlockServesASmallerRequestUpToTwiceItsSize) {
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({3 << 20}, DType::kF32, Device::cuda(0));  // 12 MiB
    first = t.raw();
  }
  Tensor smaller = Tensor::empty({2 << 20}, DType::kF32, Device::cuda(0));  // 8 MiB
  EXPECT_EQ(smaller.raw(), first);
}
#endif

TEST_F(CudaDeviceTest, AnInvisibleDeviceIsNamedInTheError) {
  try {
    Tensor::empty({1}, DType::kF32, Device::cuda(63));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("cuda:63 is not a visible device"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace omni::tensor
