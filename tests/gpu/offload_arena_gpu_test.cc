// Offloadable memory (tensor/backend.h, tensor/cuda/offload_arena.h) on a real GPU: tensors made
// inside the scope leave the device on offload_memory() — the device's free memory grows by their
// size — and come back on restore_memory() at the same addresses with the same bytes, so a CUDA
// graph captured reading them before the offload replays to the same result after the restore.
// Skips when no GPU is visible (ctest label gpu).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/backend.h"
#include "tensor/device_graph.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace omni::tensor {
namespace {

Tensor host_values(int64_t rows, int64_t cols, float scale) {
  Tensor t = Tensor::empty({rows, cols}, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * static_cast<float>(i % 977) - 3.0f;
  return t;
}

std::vector<float> to_host(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  return std::vector<float>(host.data<float>(), host.data<float>() + host.numel());
}

TEST(OffloadArenaGpuTest, WeightsLeaveTheDeviceAndComeBackAtTheSameAddresses) {
  if (compiled_backends().find("cuda") == std::string::npos) GTEST_SKIP() << "no CUDA backend in the build";
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process";
  const Device gpu = Device::cuda(0);
  constexpr int64_t kRows = 4096, kCols = 8192;  // 128 MiB of float32
  Tensor weight, bias;
  {
    OffloadableMemoryScope offloadable(gpu);
    weight = host_values(kRows, kCols, 0.001f).to(gpu);
    bias = host_values(1, kRows, 0.01f).reshape({kRows}).to(gpu);
  }
  const Tensor x = host_values(3, kCols, 0.0001f).to(gpu);  // outside the scope: stays
  Tensor out = Tensor::empty({3, kRows}, DType::kF32, gpu);
  const DeviceGraph graph = DeviceGraph::capture(gpu, [&] { ops::linear(x, weight, bias, out); });
  graph.replay();
  const std::vector<float> expected = to_host(out);
  const std::vector<float> weight_before = to_host(weight);
  void* const weight_address = weight.raw();

  const size_t free_awake = cuda_memory_info(0).free_bytes;
  const size_t moved = offload_memory(gpu);
  const size_t free_asleep = cuda_memory_info(0).free_bytes;
  EXPECT_GE(moved, weight.nbytes() + bias.nbytes());
  EXPECT_LT(moved, weight.nbytes() + bias.nbytes() + (size_t{1} << 20));
  EXPECT_GE(free_asleep, free_awake + weight.nbytes());
  EXPECT_EQ(offload_memory(gpu), 0u) << "a second offload has nothing left to move";

  EXPECT_EQ(restore_memory(gpu), moved);
  EXPECT_EQ(restore_memory(gpu), 0u);
  EXPECT_LE(cuda_memory_info(0).free_bytes + weight.nbytes(), free_asleep);
  EXPECT_EQ(weight.raw(), weight_address);
  EXPECT_EQ(to_host(weight), weight_before);
  ops::upload(Tensor::zeros({3, kRows}, DType::kF32), out);
  graph.replay();
  EXPECT_EQ(to_host(out), expected) << "the graph captured before the offload reads the restored weights";
}

TEST(OffloadArenaGpuTest, TheArenaEmptiesWhenItsLastTensorGoes) {
  if (compiled_backends().find("cuda") == std::string::npos) GTEST_SKIP() << "no CUDA backend in the build";
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process";
  const Device gpu = Device::cuda(0);
  {
    Tensor a;
    {
      OffloadableMemoryScope offloadable(gpu);
      a = host_values(1024, 1024, 1.0f).to(gpu);
    }
    EXPECT_GT(offload_memory(gpu), 0u);
    // Dropped while in host memory: the host copy goes with it and nothing is left to restore.
  }
  EXPECT_EQ(restore_memory(gpu), 0u);
  Tensor b;
  {
    OffloadableMemoryScope offloadable(gpu);
    b = host_values(256, 256, 2.0f).to(gpu);
  }
  EXPECT_EQ(to_host(b), to_host(host_values(256, 256, 2.0f)));
  EXPECT_EQ(offload_memory(gpu), b.nbytes());
  EXPECT_EQ(restore_memory(gpu), b.nbytes());
  EXPECT_EQ(to_host(b), to_host(host_values(256, 256, 2.0f)));
}

}  // namespace
}  // namespace omni::tensor
