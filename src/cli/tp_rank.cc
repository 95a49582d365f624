#include "cli/tp_rank.h"

#include <memory>

#include "runtime/tensor_parallel_model.h"

namespace omni::cli {

Command tp_rank_command() {
  return {"tp-rank", "Run one rank of a tensor-parallel model for its rank 0 (internal)", [](CLI::App& sub) {
            sub.group("");
            auto args = std::make_shared<runtime::TensorParallelRankArgs>();
            sub.add_option("--group", args->group, "The group's shared-memory communicator")->required();
            sub.add_option("--rank", args->rank, "This process's rank, 1..size-1")->required();
            sub.add_option("--tensor-parallel-size", args->size, "Ranks in the group")->required();
            sub.add_option("--model", args->model, "The checkpoint folder")->required();
            sub.add_option("--device", args->device, "This rank's device")->default_val("cpu");
            sub.add_option("--dtype", args->dtype, "The model's dtype (as generate's --dtype)")->default_val("auto");
            return [args] { return runtime::run_tensor_parallel_rank(*args); };
          }};
}

}  // namespace omni::cli
