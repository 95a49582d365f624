#include "tensor/tensor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>

#include "base/error.h"
#include "tensor/allocator.h"
#include "tensor/backend.h"
#include "tensor/npy.h"
#include "tensor/upload.h"

namespace omni::tensor {
namespace {

TEST(TensorTest, OwnedStorageIsAlignedContiguousAndShared) {
  Tensor t = Tensor::zeros({3, 5, 7}, DType::kF32);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % kTensorAlignment, 0u);
  EXPECT_EQ(t.strides(), (Shape{35, 7, 1}));
  EXPECT_EQ(t.numel(), 105);
  EXPECT_EQ(t.nbytes(), 420u);
  EXPECT_TRUE(t.owns_storage());
  EXPECT_EQ(t.dim(-1), 7);
  Tensor view = t.reshape({15, -1});
  EXPECT_EQ(view.shape(), (Shape{15, 7}));
  view.data<float>()[8] = 2.5f;
  EXPECT_EQ(t.data<float>()[8], 2.5f);
  Tensor rows = view.slice_rows(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 7}));
  EXPECT_EQ(rows.data<float>()[1], 2.5f);
}

TEST(TensorTest, BorrowedStorageViewsTheCallersBytes) {
  float buf[6] = {1, 2, 3, 4, 5, 6};
  Tensor t = Tensor::borrow(buf, {2, 3}, DType::kF32);
  EXPECT_FALSE(t.owns_storage());
  EXPECT_EQ(t.data<float>()[4], 5.0f);
}

TEST(TensorTest, ReadingAsTheWrongTypeAndBadReshapesAreErrors) {
  Tensor t = Tensor::empty({4}, DType::kI32);
  EXPECT_THROW(t.data<float>(), Error);
  EXPECT_THROW(t.reshape({3}), Error);
  EXPECT_THROW(t.slice_rows(2, 5), Error);
  // Without a GPU (or without the CUDA backend) there is no cuda:0 to allocate on.
  if (cuda_device_count() == 0) EXPECT_THROW(Tensor::empty({2}, DType::kF32, Device::cuda(0)), Error);
}

TEST(DTypeTest, Float16NarrowingRoundsToNearestEvenAndRoundTrips) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0) continue;  // NaN payloads need not survive
    ASSERT_EQ(f32_to_f16(f16_to_f32(h)), h) << "half bits " << bits;
  }
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // halfway rounds to even (down)
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // halfway rounds to even (up)
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                          // rounds past the largest half
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);             // half the smallest subnormal: even
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
}

TEST(DTypeTest, HalfFormatsWidenExactly) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc049), -3.140625f);
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);  // halfway rounds to even
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);  // halfway rounds to even (up)
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc500), -5.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_EQ(std::signbit(f16_to_f32(0x8000)), true);
}

TEST(DeviceTest, ParsesCpuAndCudaAndRejectsOthersNamingTheSource) {
  EXPECT_EQ(parse_device("cpu", "--device"), Device::cpu());
  EXPECT_EQ(parse_device("cuda:1", "--device"), Device::cuda(1));
  try {
    parse_device("tpu", "--device");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--device: unknown device 'tpu' (allowed: cpu, cuda, cuda:N)");
  }
}

TEST(NpyTest, RoundTripsFloatAndIntArrays) {
  const auto dir = std::filesystem::temp_directory_path() / ("omni_npy_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  Tensor f = Tensor::empty({2, 3}, DType::kF32);
  for (int i = 0; i < 6; ++i) f.data<float>()[i] = 0.5f * i - 1.0f;
  save_npy(dir / "f.npy", f);
  Tensor back = load_npy(dir / "f.npy");
  EXPECT_EQ(back.shape(), f.shape());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(back.data<float>()[i], f.data<float>()[i]);
  Tensor ids = Tensor::empty({4}, DType::kI32);
  for (int i = 0; i < 4; ++i) ids.data<int32_t>()[i] = i * 7;
  save_npy(dir / "i.npy", ids);
  Tensor ids_back = load_npy(dir / "i.npy");
  EXPECT_EQ(ids_back.shape(), (Shape{4}));
  EXPECT_EQ(ids_back.data<int32_t>()[3], 21);
  // The header is padded so the data starts on a 64-byte boundary, as numpy writes it.
  EXPECT_EQ((std::filesystem::file_size(dir / "f.npy") - 24) % 64, 0u);
  EXPECT_THROW(load_npy(dir / "missing.npy"), Error);
  std::filesystem::remove_all(dir);
}

// copy_from_host writes at an element offset, converting between the floating dtypes (here on the
// host; the GPU path is covered by the model tests, which load every weight through it), and refuses
// ranges past the end and conversions it cannot do.
TEST(CopyFromHostTest, WritesAtAnOffsetConvertingTheDtype) {
  const float values[] = {1.5f, -2.25f, 3.0e-3f};
  Tensor bf16 = Tensor::zeros({5}, DType::kBF16);
  copy_from_host({values}, DType::kF32, 3, bf16, 2);
  const auto* bits = static_cast<const uint16_t*>(bf16.raw());
  EXPECT_EQ(bits[0], 0);
  EXPECT_EQ(bits[1], 0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bits[2 + i], f32_to_bf16(values[i])) << i;

  Tensor f32 = Tensor::empty({3}, DType::kF32);
  copy_from_host({bits + 2}, DType::kBF16, 3, f32, 0);
  EXPECT_EQ(f32.data<float>()[0], 1.5f);
  EXPECT_EQ(f32.data<float>()[1], -2.25f);
  EXPECT_EQ(f32.data<float>()[2], bf16_to_f32(f32_to_bf16(3.0e-3f)));

  EXPECT_THROW(copy_from_host({values}, DType::kF32, 3, bf16, 3), Error);
  Tensor ints = Tensor::empty({3}, DType::kI32);
  EXPECT_THROW(copy_from_host({values}, DType::kF32, 3, ints, 0), Error);
}

}  // namespace
}  // namespace omni::tensor
