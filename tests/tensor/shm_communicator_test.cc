// The shared-memory communicator with real processes (fork): all-reduce, all-gather and broadcast
// give every rank the right values, also for tensors larger than a slot; a dead peer or a closed
// group fails a waiting rank with kUnavailable naming it; the segment's name is gone after join()
// and after a failed start.
#include "tensor/cpu/shm_communicator.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"

namespace omni::tensor::cpu {
namespace {

constexpr size_t kSmallSlot = 256;  // 64 floats: the tensors below take several pieces

// Runs `body(rank)` in a forked child per rank 1..world-1; returns their pids. The child exits
// with 0 when body returns true, 1 when it returns false, 2 on an exception.
std::vector<pid_t> fork_ranks(int world, const std::function<bool(int rank)>& body) {
  std::vector<pid_t> pids;
  for (int rank = 1; rank < world; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      int code = 2;
      try {
        code = body(rank) ? 0 : 1;
      } catch (...) {
      }
      _exit(code);
    }
    pids.push_back(pid);
  }
  return pids;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool name_exists(const std::string& name) { return std::filesystem::exists("/dev/shm" + name); }

// The values rank r contributes: distinct per rank and element.
float value(int rank, int64_t i) { return static_cast<float>(rank * 1000 + i) * 0.5f; }

bool exercise(ShmCommunicator& comm) {
  const int world = comm.world_size();
  const int64_t n = 200;
  Tensor x = Tensor::empty({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = value(comm.rank(), i);
  comm.all_reduce_sum(x);
  for (int64_t i = 0; i < n; ++i) {
    float want = value(0, i);
    for (int r = 1; r < world; ++r) want += value(r, i);
    if (x.data<float>()[i] != want) return false;
  }
  Tensor part = Tensor::empty({2, 50}, DType::kF32);
  for (int64_t i = 0; i < 100; ++i) part.data<float>()[i] = value(comm.rank(), i);
  Tensor all = Tensor::empty({world, 2, 50}, DType::kF32);
  comm.all_gather(part, all);
  for (int r = 0; r < world; ++r) {
    for (int64_t i = 0; i < 100; ++i) {
      if (all.data<float>()[r * 100 + i] != value(r, i)) return false;
    }
  }
  std::string message = comm.rank() == 0 ? std::string(1000, 'm') + "end" : "stale";
  comm.broadcast_bytes(message);
  if (message != std::string(1000, 'm') + "end") return false;
  std::string empty = comm.rank() == 0 ? "" : "stale";
  comm.broadcast_bytes(empty);
  return empty.empty();
}

class ShmCommunicatorTest : public ::testing::TestWithParam<int> {};

TEST_P(ShmCommunicatorTest, CollectivesGiveEveryRankTheSameResults) {
  const int world = GetParam();
  auto root = ShmCommunicator::create(world, nullptr, kSmallSlot);
  const std::string name = root->name();
  EXPECT_EQ(name.rfind("/omnistage_tp_", 0), 0u) << name;
  EXPECT_TRUE(name_exists(name));
  std::vector<pid_t> pids = fork_ranks(world, [&](int rank) {
    auto comm = ShmCommunicator::attach(name, rank, world, nullptr);
    comm->join();
    return exercise(*comm);
  });
  root->join();
  EXPECT_FALSE(name_exists(name)) << "rank 0 unlinks the name once every rank attached";
  EXPECT_TRUE(exercise(*root));
  for (pid_t pid : pids) EXPECT_EQ(wait_exit(pid), 0);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmCommunicatorTest, ::testing::Values(1, 2, 3, 4));

TEST(ShmCommunicatorFailureTest, DeadPeerFailsTheWaitingRankThroughItsCheck) {
  std::vector<pid_t> pids;
  bool peer_gone = false;
  auto root = ShmCommunicator::create(2, [&] {
    int status = 0;
    if (!peer_gone && waitpid(pids.at(0), &status, WNOHANG) == pids.at(0)) peer_gone = true;
    if (peer_gone) throw_error(ErrorCode::kUnavailable, "rank 1 exited");
  });
  const std::string name = root->name();
  pids = fork_ranks(2, [&](int rank) {
    auto comm = ShmCommunicator::attach(name, rank, 2, nullptr);
    comm->join();
    _exit(7);  // dies without a word, as a crash would
    return true;
  });
  root->join();
  Tensor x = Tensor::zeros({4}, DType::kF32);
  try {
    root->all_reduce_sum(x);
    FAIL() << "all_reduce_sum returned without its peer";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_STREQ(e.what(), "rank 1 exited");
  }
  EXPECT_FALSE(name_exists(name));
}

TEST(ShmCommunicatorFailureTest, ClosedGroupFailsTheWaitingRankNamingWhoLeft) {
  auto root = ShmCommunicator::create(2, nullptr);
  const std::string name = root->name();
  std::vector<pid_t> pids = fork_ranks(2, [&](int rank) {
    auto comm = ShmCommunicator::attach(name, rank, 2, nullptr);
    comm->join();
    try {
      Tensor x = Tensor::zeros({4}, DType::kF32);
      comm->all_reduce_sum(x);
    } catch (const Error& e) {
      return e.code() == ErrorCode::kUnavailable &&
             std::string(e.what()).find("rank 0 left the group") != std::string::npos;
    }
    return false;
  });
  root->join();
  root.reset();  // leaves while rank 1 waits in all_reduce_sum
  EXPECT_EQ(wait_exit(pids[0]), 0);
}

TEST(ShmCommunicatorFailureTest, NameIsRemovedWhenRankZeroGoesBeforeJoin) {
  std::string name;
  {
    auto root = ShmCommunicator::create(3, nullptr);
    name = root->name();
    EXPECT_TRUE(name_exists(name));
  }
  EXPECT_FALSE(name_exists(name));
  try {
    ShmCommunicator::attach(name, 1, 3, nullptr);
    FAIL() << "attached to a removed segment";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

TEST(ShmCommunicatorFailureTest, AttachWithAnotherWorldSizeIsRejected) {
  auto root = ShmCommunicator::create(2, nullptr);
  EXPECT_THROW(ShmCommunicator::attach(root->name(), 1, 3, nullptr), Error);
  EXPECT_THROW(ShmCommunicator::attach(root->name(), 2, 2, nullptr), Error);
  EXPECT_THROW(ShmCommunicator::create(0, nullptr), Error);
}

}  // namespace
}  // namespace omni::tensor::cpu
