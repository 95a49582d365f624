// NCCL between two processes on two GPUs (label gpu; skipped with fewer than two visible GPUs):
// all-reduce in float32 and bfloat16 and all-gather give both ranks the right values and the
// same bits; the latency of a decode-sized all-reduce (one token of Qwen3-8B's hidden size, 4096
// bfloat16) is printed, not asserted. NCCL is found through OMNI_NCCL_LIBRARY or the library path.
#include "tensor/cuda/nccl_communicator.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "base/error.h"
#include "tensor/cpu/shm_communicator.h"
#include "tensor/cuda/device.h"

namespace omni::tensor::cuda {
namespace {

// CUDA must not be initialised before fork(), so a throwaway child counts the devices.
int count_devices_in_child() {
  pid_t pid = fork();
  if (pid == 0) _exit(std::min(visible_device_count(), 100));
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}

float value(int rank, int64_t i) { return static_cast<float>((i % 97) + 1000 * rank) * 0.25f; }

std::vector<float> to_host_f32(const Tensor& t) {
  Tensor host = t.to(Device::cpu());
  std::vector<float> out(static_cast<size_t>(host.numel()));
  convert_to_f32(host.dtype(), host.raw(), out.data(), out.size());
  return out;
}

// One rank's whole test; returns an empty string when everything matched, else what did not.
std::string run_rank(std::unique_ptr<cpu::ShmCommunicator> host, int rank) {
  host->join();
  NcclCommunicator comm(std::move(host), rank);
  const Device device = Device::cuda(rank);
  const int64_t n = 5000;

  Tensor x32 = Tensor::empty({n}, DType::kF32);
  Tensor x16 = Tensor::empty({n}, DType::kBF16);
  for (int64_t i = 0; i < n; ++i) {
    x32.data<float>()[i] = value(rank, i);
    x16.data<uint16_t>()[i] = f32_to_bf16(value(rank, i));
  }
  Tensor d32 = x32.to(device), d16 = x16.to(device);
  comm.all_reduce_sum(d32);
  comm.all_reduce_sum(d16);
  const std::vector<float> sum32 = to_host_f32(d32), sum16 = to_host_f32(d16);
  for (int64_t i = 0; i < n; ++i) {
    const float want = value(0, i) + value(1, i);
    if (sum32[i] != want) return "float32 all_reduce element " + std::to_string(i);
    if (sum16[i] !=
        bf16_to_f32(f32_to_bf16(bf16_to_f32(f32_to_bf16(value(0, i))) + bf16_to_f32(f32_to_bf16(value(1, i)))))) {
      return "bfloat16 all_reduce element " + std::to_string(i);
    }
  }

  Tensor part = Tensor::empty({2, 3}, DType::kF32);
  for (int64_t i = 0; i < 6; ++i) part.data<float>()[i] = value(rank, i);
  Tensor gathered = Tensor::empty({2, 2, 3}, DType::kF32, device);
  comm.all_gather(part.to(device), gathered);
  const std::vector<float> all = to_host_f32(gathered);
  for (int r = 0; r < 2; ++r) {
    for (int64_t i = 0; i < 6; ++i) {
      if (all[r * 6 + i] != value(r, i)) return "all_gather element " + std::to_string(r * 6 + i);
    }
  }

  std::string message = rank == 0 ? "from rank 0" : "";
  comm.broadcast_bytes(message);
  if (message != "from rank 0") return "broadcast_bytes";

  // A decode step's all-reduce: one token of hidden size 4096 in bfloat16.
  Tensor token = Tensor::zeros({4096}, DType::kBF16).to(device);
  for (int i = 0; i < 20; ++i) comm.all_reduce_sum(token);
  synchronize(rank);
  constexpr int kCalls = 1000;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) comm.all_reduce_sum(token);
  synchronize(rank);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  if (rank == 0) std::printf("NCCL all_reduce of 4096 bf16 over 2 GPUs: %.1f us per call\n", us / kCalls);
  return "";
}

TEST(NcclCommunicatorTest, TwoRanksOnTwoGpusAllReduceAndAllGather) {
  if (count_devices_in_child() < 2) GTEST_SKIP() << "needs two visible GPUs";
  auto root = cpu::ShmCommunicator::create(2, nullptr);
  const std::string name = root->name();
  pid_t child = fork();
  if (child == 0) {
    int code = 2;
    try {
      std::string failure = run_rank(cpu::ShmCommunicator::attach(name, 1, 2, nullptr), 1);
      if (!failure.empty()) std::fprintf(stderr, "rank 1: %s\n", failure.c_str());
      code = failure.empty() ? 0 : 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank 1: %s\n", e.what());
    }
    _exit(code);
  }
  std::string failure;
  try {
    failure = run_rank(std::move(root), 0);
  } catch (const Error& e) {
    failure = e.what();
  }
  EXPECT_EQ(failure, "");
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank 1 failed (its message is above)";
}

}  // namespace
}  // namespace omni::tensor::cuda
