// A causal LM split over a tensor-parallel group of processes, one per rank.
//
// The process that loads the model is rank 0: it holds the engine, and its CausalLm is the
// whole model to the engine. Ranks 1..N-1 are child processes it starts (`omnistage tp-rank`,
// an internal subcommand) and stops with the model. The ranks share one shared-memory
// communicator (tensor/cpu/shm_communicator.h): rank 0 broadcasts every init_kv_cache and
// forward call as a control message, then every rank runs the call on its own shard
// (model/tensor_parallel.h) and the ranks meet in the shard's collectives.
//
// Devices: rank r runs on device index r of `device`'s type, i.e. the r-th entry of the
// process's CUDA_VISIBLE_DEVICES (the stage's `devices`, device_assignment.h); on the CPU every
// rank uses the CPU.
//
// Failure: a rank that dies fails the model as a whole. Rank 0 notices it in the next
// collective (it reaps its children while it waits) and throws omni::Error(kUnavailable) naming
// the rank and how it ended; every later call throws the same. A child notices that rank 0 is
// gone the same way, and PR_SET_PDEATHSIG kills it when rank 0's starting thread ends. The
// shared-memory name is unlinked as soon as all ranks have attached, so a crash leaves nothing
// in /dev/shm.
//
// Threads: the returned model is used by one thread, as every CausalLm; load it on the thread
// that will outlive it (PR_SET_PDEATHSIG follows the starting thread).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "base/json.h"
#include "model/causal_lm.h"
#include "tensor/device.h"
#include "tensor/dtype.h"

namespace omni::runtime {

struct TensorParallelLaunch {
  int size = 1;
  tensor::Device device;
  // Every rank's dtype (model/model_dtype.h); nullopt: auto.
  std::optional<tensor::DType> dtype;
  // The omnistage executable the other ranks run.
  std::string program = "/proc/self/exe";
  // The stage's engine arguments, for a model's own settings (model::CausalLmLoadOptions).
  Json engine_args = Json::object();
};

// Loads the model in `dir` (model::builtin_model_registry()) split over launch.size ranks; with
// size 1 it is the plain model and no process is started. Throws what the loaders throw,
// kInvalidConfig when the model cannot be split that way, kUnavailable naming the rank when one
// fails to start or to load (its own error is in its log), kUnsupported for a CUDA device in a
// build without the CUDA backend.
std::unique_ptr<model::CausalLm> load_tensor_parallel_lm(const std::filesystem::path& dir,
                                                         const TensorParallelLaunch& launch);

// What `omnistage tp-rank` is started with.
struct TensorParallelRankArgs {
  std::string group;  // the shared-memory communicator's name
  int rank = 1;
  int size = 2;
  std::filesystem::path model;
  std::string device = "cpu";
  std::string dtype = "auto";  // a --dtype value (model/model_dtype.h)
};

// The body of a rank process: attach, load the shard, then run rank 0's calls until it stops the
// group. Returns 0 after a normal stop; throws omni::Error when the rank cannot go on (rank 0
// gone: kUnavailable).
int run_tensor_parallel_rank(const TensorParallelRankArgs& args);

}  // namespace omni::runtime
