#include "tensor/cpu/shm_communicator.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

#include "base/error.h"

namespace omni::tensor::cpu {

namespace {

constexpr uint64_t kMagic = 0x6f6d6e6974703031;  // "omnitp01"
constexpr int kSpinsBeforeSleep = 200;
constexpr long kWaitSliceNs = 5'000'000;  // how often a waiting rank checks on its peers

std::atomic<uint32_t> segment_counter{0};

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
  timespec slice{0, kWaitSliceNs};
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &slice, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

struct alignas(64) ShmCommunicator::Header {
  uint64_t magic;
  uint32_t world_size;
  uint64_t slot_bytes;
  alignas(64) std::atomic<uint32_t> arrived;
  alignas(64) std::atomic<uint32_t> generation;
  // 0 while the group is intact, else 1 + the rank that left it.
  alignas(64) std::atomic<uint32_t> closed_by;
  uint64_t broadcast_size;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "the barrier needs address-free atomics");

ShmCommunicator::ShmCommunicator(std::string name, int rank, int world_size, PeerCheck check)
    : name_(std::move(name)), rank_(rank), world_size_(world_size), check_(std::move(check)) {}

std::unique_ptr<ShmCommunicator> ShmCommunicator::create(int world_size, PeerCheck check, size_t slot_bytes) {
  if (world_size < 1 || world_size > kMaxShmRanks) {
    throw_error(ErrorCode::kInvalidArgument, "shared-memory communicator: world size {} is outside [1, {}]", world_size,
                kMaxShmRanks);
  }
  if (slot_bytes < 64 || slot_bytes % 64 != 0) {
    throw_error(ErrorCode::kInvalidArgument, "shared-memory communicator: slot size {} is not a multiple of 64",
                slot_bytes);
  }
  std::string name = fmt::format("/omnistage_tp_{}_{}", getpid(), segment_counter.fetch_add(1));
  std::unique_ptr<ShmCommunicator> comm(new ShmCommunicator(name, 0, world_size, std::move(check)));
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw_error(ErrorCode::kUnavailable, "shared-memory communicator: cannot create {}: {}", name,
                std::strerror(errno));
  }
  comm->linked_ = true;
  const size_t size = sizeof(Header) + slot_bytes * world_size;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int err = errno;
    close(fd);
    throw_error(ErrorCode::kUnavailable, "shared-memory communicator: cannot size {} to {} bytes: {}", name, size,
                std::strerror(err));
  }
  comm->map(fd, size);
  // The fresh segment is zero-filled, which is the atomics' initial state.
  Header* h = new (comm->mapping_) Header{};
  h->world_size = static_cast<uint32_t>(world_size);
  h->slot_bytes = slot_bytes;
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kMagic;
  comm->slot_bytes_ = slot_bytes;
  return comm;
}

std::unique_ptr<ShmCommunicator> ShmCommunicator::attach(const std::string& name, int rank, int world_size,
                                                         PeerCheck check) {
  if (rank < 1 || rank >= world_size) {
    throw_error(ErrorCode::kInvalidArgument, "shared-memory communicator {}: rank {} is outside [1, {})", name, rank,
                world_size);
  }
  std::unique_ptr<ShmCommunicator> comm(new ShmCommunicator(name, rank, world_size, std::move(check)));
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw_error(ErrorCode::kUnavailable, "shared-memory communicator: cannot open {}: {}", name, std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(Header)) {
    close(fd);
    throw_error(ErrorCode::kUnavailable, "shared-memory communicator: {} is not a communicator segment", name);
  }
  comm->map(fd, static_cast<size_t>(st.st_size));
  Header* h = comm->header_;
  if (h->magic != kMagic || h->world_size != static_cast<uint32_t>(world_size) ||
      sizeof(Header) + h->slot_bytes * world_size != comm->mapping_size_) {
    throw_error(ErrorCode::kInvalidArgument, "shared-memory communicator: {} was made for {} ranks, not {}", name,
                h->world_size, world_size);
  }
  comm->slot_bytes_ = h->slot_bytes;
  return comm;
}

void ShmCommunicator::map(int fd, size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    throw_error(ErrorCode::kUnavailable, "shared-memory communicator: cannot map {}: {}", name_, std::strerror(err));
  }
  mapping_ = p;
  mapping_size_ = size;
  header_ = static_cast<Header*>(p);
}

ShmCommunicator::~ShmCommunicator() {
  if (header_) {
    uint32_t open = 0;
    header_->closed_by.compare_exchange_strong(open, static_cast<uint32_t>(rank_) + 1);
    futex_wake_all(&header_->generation);
  }
  if (mapping_) munmap(mapping_, mapping_size_);
  unlink_name();
}

void ShmCommunicator::unlink_name() {
  if (!linked_) return;
  shm_unlink(name_.c_str());
  linked_ = false;
}

unsigned char* ShmCommunicator::slot(int rank) const {
  return static_cast<unsigned char*>(mapping_) + sizeof(Header) + slot_bytes_ * rank;
}

void ShmCommunicator::barrier() {
  Header& h = *header_;
  const uint32_t generation = h.generation.load(std::memory_order_acquire);
  if (h.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(world_size_)) {
    h.arrived.store(0, std::memory_order_relaxed);
    h.generation.fetch_add(1, std::memory_order_release);
    futex_wake_all(&h.generation);
    return;
  }
  for (int spin = 0; h.generation.load(std::memory_order_acquire) == generation; ++spin) {
    if (uint32_t closed = h.closed_by.load(std::memory_order_acquire)) {
      // A rank that passed this barrier may leave at once; its passing counts.
      if (h.generation.load(std::memory_order_acquire) != generation) break;
      throw_error(ErrorCode::kUnavailable, "tensor-parallel rank {}: rank {} left the group {}", rank_, closed - 1,
                  name_);
    }
    if (spin < kSpinsBeforeSleep) continue;
    futex_wait(&h.generation, generation);
    if (!check_) continue;
    try {
      check_();
    } catch (...) {
      // A peer that passed this barrier may exit at once; only one that never came is at fault.
      if (h.generation.load(std::memory_order_acquire) != generation) break;
      throw;
    }
  }
}

void ShmCommunicator::join() {
  barrier();
  if (rank_ == 0) unlink_name();
}

void ShmCommunicator::all_reduce_sum(Tensor& x) {
  if (x.device().type != DeviceType::kCpu || x.dtype() != DType::kF32 || !x.is_contiguous()) {
    throw_error(ErrorCode::kInvalidArgument,
                "all_reduce_sum: the shared-memory communicator takes contiguous float32 CPU tensors");
  }
  float* data = x.data<float>();
  const int64_t n = x.numel();
  const int64_t piece = static_cast<int64_t>(slot_bytes_ / sizeof(float));
  for (int64_t begin = 0; begin < n; begin += piece) {
    const int64_t count = std::min(piece, n - begin);
    std::memcpy(slot(rank_), data + begin, count * sizeof(float));
    barrier();
    const float* first = reinterpret_cast<const float*>(slot(0));
    std::copy_n(first, count, data + begin);
    for (int r = 1; r < world_size_; ++r) {
      const float* part = reinterpret_cast<const float*>(slot(r));
      for (int64_t i = 0; i < count; ++i) data[begin + i] += part[i];
    }
    barrier();
  }
}

void ShmCommunicator::all_gather(const Tensor& in, Tensor& out) {
  if (in.device().type != DeviceType::kCpu || out.device().type != DeviceType::kCpu || !in.is_contiguous() ||
      !out.is_contiguous() || in.dtype() != out.dtype() || out.numel() != in.numel() * world_size_) {
    throw_error(ErrorCode::kInvalidArgument,
                "all_gather: in {} and out {} must be contiguous CPU tensors of one dtype with out holding {} x in",
                shape_to_string(in.shape()), shape_to_string(out.shape()), world_size_);
  }
  const auto* src = static_cast<const unsigned char*>(in.raw());
  auto* dst = static_cast<unsigned char*>(out.raw());
  const size_t bytes = in.nbytes();
  for (size_t begin = 0; begin < bytes; begin += slot_bytes_) {
    const size_t count = std::min(slot_bytes_, bytes - begin);
    std::memcpy(slot(rank_), src + begin, count);
    barrier();
    for (int r = 0; r < world_size_; ++r) std::memcpy(dst + r * bytes + begin, slot(r), count);
    barrier();
  }
}

void ShmCommunicator::broadcast_bytes(std::string& bytes) {
  if (rank_ == 0) header_->broadcast_size = bytes.size();
  barrier();
  const size_t size = header_->broadcast_size;
  if (rank_ != 0) bytes.resize(size);
  for (size_t begin = 0;;) {
    const size_t count = std::min(slot_bytes_, size - begin);
    if (rank_ == 0) std::memcpy(slot(0), bytes.data() + begin, count);
    barrier();
    if (rank_ != 0) std::memcpy(bytes.data() + begin, slot(0), count);
    barrier();
    begin += count;
    if (begin >= size) break;
  }
}

}  // namespace omni::tensor::cpu
