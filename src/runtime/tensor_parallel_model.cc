#include "runtime/tensor_parallel_model.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "model/model_dtype.h"
#include "model/model_registry.h"
#include "runtime/child_process.h"
#include "tensor/communicator.h"
#include "tensor/cpu/shm_communicator.h"

namespace omni::runtime {

namespace {

// The control messages rank 0 broadcasts: one op byte, then its arguments as int32 words.
enum class RankOp : char { kInitKvCache = 'I', kForward = 'F', kStop = 'S' };

constexpr auto kRankStopTimeout = std::chrono::seconds(10);

class MessageWriter {
 public:
  explicit MessageWriter(RankOp op) { bytes_.push_back(static_cast<char>(op)); }
  void word(int32_t value) { bytes_.append(reinterpret_cast<const char*>(&value), sizeof value); }
  void words(const std::vector<int32_t>& values) {
    word(static_cast<int32_t>(values.size()));
    bytes_.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int32_t));
  }
  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

class MessageReader {
 public:
  explicit MessageReader(const std::string& bytes) : bytes_(bytes) {
    if (bytes.empty()) throw_error(ErrorCode::kInternal, "tensor-parallel rank: empty control message");
  }
  RankOp op() const { return static_cast<RankOp>(bytes_[0]); }
  int32_t word() {
    int32_t value = 0;
    take(&value, sizeof value);
    return value;
  }
  std::vector<int32_t> words() {
    const int32_t n = word();
    if (n < 0) throw_error(ErrorCode::kInternal, "tensor-parallel rank: control message with a negative count");
    std::vector<int32_t> values(static_cast<size_t>(n));
    take(values.data(), values.size() * sizeof(int32_t));
    return values;
  }

 private:
  void take(void* out, size_t n) {
    if (offset_ + n > bytes_.size()) throw_error(ErrorCode::kInternal, "tensor-parallel rank: truncated message");
    std::memcpy(out, bytes_.data() + offset_, n);
    offset_ += n;
  }
  const std::string& bytes_;
  size_t offset_ = 1;
};

std::string encode_forward(const model::ForwardBatch& batch) {
  MessageWriter m(RankOp::kForward);
  m.word(batch.all_logits ? 1 : 0);
  m.words(batch.token_ids);
  m.words(batch.positions);
  m.word(static_cast<int32_t>(batch.seqs.size()));
  for (const model::SequenceSlice& s : batch.seqs) {
    m.word(s.query_start);
    m.word(s.query_len);
    m.word(s.context_len);
    m.word(s.wants_logits ? 1 : 0);
    m.words(s.block_table);
  }
  return std::move(m.bytes());
}

model::ForwardBatch decode_forward(MessageReader& m) {
  model::ForwardBatch batch;
  batch.all_logits = m.word() != 0;
  batch.token_ids = m.words();
  batch.positions = m.words();
  batch.seqs.resize(static_cast<size_t>(std::max(0, m.word())));
  for (model::SequenceSlice& s : batch.seqs) {
    s.query_start = m.word();
    s.query_len = m.word();
    s.context_len = m.word();
    s.wants_logits = m.word() != 0;
    s.block_table = m.words();
  }
  return batch;
}

// The other ranks' processes, as rank 0 watches them.
struct RankProcesses {
  std::vector<ChildProcess> children;  // children[i] is rank i + 1

  // PeerCheck: throws naming the first rank that has ended.
  void check() {
    for (size_t i = 0; i < children.size(); ++i) {
      if (std::optional<ExitStatus> status = children[i].poll()) {
        throw_error(ErrorCode::kUnavailable, "tensor-parallel rank {} (pid {}) {}", i + 1, children[i].pid(),
                    status->describe());
      }
    }
  }
};

// Rank 0: the model the engine sees.
class RankZeroLm final : public model::CausalLm {
 public:
  RankZeroLm(const std::filesystem::path& dir, const TensorParallelLaunch& launch)
      : ranks_(std::make_shared<RankProcesses>()) {
    std::shared_ptr<RankProcesses> ranks = ranks_;
    auto host = tensor::cpu::ShmCommunicator::create(launch.size, [ranks] { ranks->check(); });
    host_ = host.get();
    for (int r = 1; r < launch.size; ++r) {
      ranks_->children.push_back(
          ChildProcess::spawn({launch.program, "tp-rank", "--group", host_->name(), "--rank", std::to_string(r),
                               "--tensor-parallel-size", std::to_string(launch.size), "--model", dir.string(),
                               "--device", tensor::device_name(tensor::Device{launch.device.type, r}), "--dtype",
                               launch.dtype ? std::string(tensor::dtype_name(*launch.dtype)) : "auto"},
                              {}));
    }
    spdlog::info("tensor parallelism: {} ranks over {} (rank 0 is pid {})", launch.size, host_->name(), getpid());
    host_->join();
    const tensor::Device device{launch.device.type, 0};
    comm_ = tensor::make_device_communicator(std::move(host), device);
    shard_ = model::builtin_model_registry().create_causal_lm(
        dir, {.device = device, .dtype = launch.dtype, .tensor_parallel = comm_.get()});
    // Every rank has loaded its shard once this returns.
    host_->barrier();
  }

  ~RankZeroLm() override {
    // Ranks that took the stop message exit by themselves; the others (a failed group) are killed.
    bool stopped = false;
    if (!broken_) {
      try {
        MessageWriter stop(RankOp::kStop);
        comm_->broadcast_bytes(stop.bytes());
        stopped = true;
      } catch (const Error& e) {
        spdlog::warn("tensor parallelism: stopping the ranks: {}", e.what());
      }
    }
    shard_.reset();
    for (ChildProcess& child : ranks_->children) {
      const ExitStatus status = child.wait_or_kill(stopped ? kRankStopTimeout : std::chrono::seconds(0));
      if (status.code != 0 || status.signal != 0) {
        spdlog::debug("tensor-parallel rank pid {} {}", child.pid(), status.describe());
      }
    }
  }

  const model::CausalLmInfo& info() const override { return shard_->info(); }
  // Each rank holds the KV heads of its shard; the pool is sized per rank (per device).
  size_t kv_bytes_per_block() const override { return shard_->kv_bytes_per_block(); }

  void init_kv_cache(int num_blocks) override {
    MessageWriter m(RankOp::kInitKvCache);
    m.word(num_blocks);
    run([&] { shard_->init_kv_cache(num_blocks); }, m.bytes());
  }

  void forward(const model::ForwardBatch& batch, std::vector<float>& logits) override {
    std::string message = encode_forward(batch);
    run([&] { shard_->forward(batch, logits); }, message);
  }

  // The other ranks run forward(), which meets this call in the same collectives.
  void forward_greedy(const model::ForwardBatch& batch, std::vector<int32_t>& token_ids) override {
    std::string message = encode_forward(batch);
    run([&] { shard_->forward_greedy(batch, token_ids); }, message);
  }

  tensor::Device device() const override { return shard_->device(); }
  size_t activation_bytes(int max_tokens, int max_logit_rows) const override {
    return shard_->activation_bytes(max_tokens, max_logit_rows);
  }

 private:
  template <typename Call>
  void run(Call&& call, std::string& message) {
    if (broken_) throw Error(ErrorCode::kUnavailable, *broken_);
    try {
      comm_->broadcast_bytes(message);
      call();
    } catch (const Error& e) {
      // The other ranks raise the same argument errors from the same inputs and go on; anything
      // else leaves the group out of step.
      if (e.code() != ErrorCode::kInvalidArgument) broken_ = e.what();
      throw;
    }
  }

  std::shared_ptr<RankProcesses> ranks_;
  tensor::cpu::ShmCommunicator* host_ = nullptr;  // the control channel; owned by comm_
  std::unique_ptr<tensor::Communicator> comm_;
  std::unique_ptr<model::CausalLm> shard_;
  std::optional<std::string> broken_;
};

}  // namespace

std::unique_ptr<model::CausalLm> load_tensor_parallel_lm(const std::filesystem::path& dir,
                                                         const TensorParallelLaunch& launch) {
  if (launch.size < 1) {
    throw_error(ErrorCode::kInvalidArgument, "tensor_parallel_size must be >= 1, got {}", launch.size);
  }
  if (launch.size == 1) {
    return model::builtin_model_registry().create_causal_lm(
        dir, {.device = launch.device, .dtype = launch.dtype, .engine_args = launch.engine_args});
  }
  return std::make_unique<RankZeroLm>(dir, launch);
}

int run_tensor_parallel_rank(const TensorParallelRankArgs& args) {
  const tensor::Device device = tensor::parse_device(args.device, "--device");
  const std::optional<tensor::DType> dtype = model::parse_model_dtype(args.dtype, "--dtype");
  const pid_t parent = getppid();
  auto host = tensor::cpu::ShmCommunicator::attach(args.group, args.rank, args.size, [parent, rank = args.rank] {
    if (getppid() != parent) {
      throw_error(ErrorCode::kUnavailable, "tensor-parallel rank {}: rank 0 (pid {}) is gone", rank, parent);
    }
  });
  tensor::cpu::ShmCommunicator& control = *host;
  control.join();
  std::unique_ptr<tensor::Communicator> comm = tensor::make_device_communicator(std::move(host), device);
  std::unique_ptr<model::CausalLm> shard = model::builtin_model_registry().create_causal_lm(
      args.model, {.device = device, .dtype = dtype, .tensor_parallel = comm.get()});
  control.barrier();
  std::vector<float> logits;
  while (true) {
    std::string message;
    comm->broadcast_bytes(message);
    MessageReader m(message);
    try {
      switch (m.op()) {
        case RankOp::kStop:
          return 0;
        case RankOp::kInitKvCache:
          shard->init_kv_cache(m.word());
          break;
        case RankOp::kForward:
          shard->forward(decode_forward(m), logits);
          break;
        default:
          throw_error(ErrorCode::kInternal, "tensor-parallel rank {}: unknown control message '{}'", args.rank,
                      message[0]);
      }
    } catch (const Error& e) {
      // Rank 0 raised the same error from the same arguments before any collective.
      if (e.code() != ErrorCode::kInvalidArgument) throw;
      spdlog::debug("tensor-parallel rank {}: {}", args.rank, e.what());
    }
  }
}

}  // namespace omni::runtime
