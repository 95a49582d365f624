#include "tensor/host_readback.h"

#include <gtest/gtest.h>

#include <vector>

#include "base/error.h"
#include "tensor/backend.h"

namespace omni::tensor {
namespace {

std::vector<int32_t> values_of(const Tensor& host) {
  return std::vector<int32_t>(host.data<int32_t>(), host.data<int32_t>() + host.numel());
}

// The copy holds the source as it was when start() queued it, even when the source is rewritten
// before wait(); a second start() reuses the buffer.
void check_reads_back(Device device) {
  Tensor host = Tensor::empty({3}, DType::kI32);
  host.data<int32_t>()[0] = 4;
  host.data<int32_t>()[1] = -5;
  host.data<int32_t>()[2] = 6;
  Tensor src = device.type == DeviceType::kCpu ? host.to(Device::cpu()) : host.to(device);
  HostReadback readback;
  EXPECT_FALSE(readback.pending());
  readback.start(src);
  EXPECT_TRUE(readback.pending());
  Tensor got = readback.wait();
  EXPECT_FALSE(readback.pending());
  EXPECT_EQ(got.shape(), (Shape{3}));
  EXPECT_EQ(got.device().type, DeviceType::kCpu);
  EXPECT_EQ(values_of(got), (std::vector<int32_t>{4, -5, 6}));

  const Tensor two = src.slice_rows(1, 3);
  readback.start(two);
  EXPECT_EQ(values_of(readback.wait()), (std::vector<int32_t>{-5, 6}));
}

TEST(HostReadbackTest, CopiesAHostTensorAtStart) {
  check_reads_back(Device::cpu());
  Tensor host = Tensor::empty({1}, DType::kI32);
  host.data<int32_t>()[0] = 1;
  HostReadback readback;
  readback.start(host);
  host.data<int32_t>()[0] = 2;
  EXPECT_EQ(values_of(readback.wait()), (std::vector<int32_t>{1}));
}

TEST(HostReadbackTest, CopiesADeviceTensorBehindItsStream) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process";
  check_reads_back(Device::cuda(0));
}

// A second start() before wait() would overwrite the copy in flight.
TEST(HostReadbackTest, RefusesToStartTwiceOrWaitForNothing) {
  HostReadback readback;
  try {
    readback.wait();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
  }
  Tensor host = Tensor::zeros({2}, DType::kI32);
  readback.start(host);
  try {
    readback.start(host);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_NE(std::string(e.what()).find("not waited for"), std::string::npos) << e.what();
  }
  EXPECT_EQ(values_of(readback.wait()), (std::vector<int32_t>{0, 0}));
  EXPECT_THROW(readback.start(Tensor()), Error);
}

}  // namespace
}  // namespace omni::tensor
