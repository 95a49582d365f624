// Which devices a stage replica process sees: a stage's `devices` ("0,1") are indices into the
// launcher's CUDA_VISIBLE_DEVICES (physical ids when the launcher has none), and the replicas of a
// stage split them (vLLM-Omni's rules; docs/configuration.md, "Tensor parallelism and stage
// placement"). The result is the CUDA_VISIBLE_DEVICES value each replica process is started with.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace omni::runtime {

// The physical device ids of a stage. `launcher_visible` is the launcher's CUDA_VISIBLE_DEVICES
// (nullopt when unset). Indices inside it are mapped; when every index is outside it the ids are
// taken as physical ids; when only some are outside, those are dropped with a warning. Throws
// omni::Error(kInvalidConfig) naming the stage for a non-numeric entry or when nothing maps.
std::vector<std::string> map_stage_devices(int stage_id, const std::string& devices,
                                           const std::optional<std::string>& launcher_visible);

// Splits a stage's devices among `replicas` replicas of `per_replica` devices each: either
// exactly replicas * per_replica devices (a pool, cut into consecutive slices), or exactly
// per_replica devices (a template: replica r gets the listed index a as r * per_replica + a,
// entries must be below per_replica). Throws omni::Error(kInvalidConfig) naming the stage and both
// accepted counts otherwise. With no devices every replica gets none.
std::vector<std::vector<std::string>> split_devices_for_replicas(int stage_id, const std::vector<std::string>& devices,
                                                                 int replicas, int per_replica);

// Both steps: the CUDA_VISIBLE_DEVICES value of each replica, or nullopt when the stage names
// no devices (the process inherits the launcher's environment).
std::vector<std::optional<std::string>> replica_visible_devices(int stage_id, const std::string& devices, int replicas,
                                                                int per_replica,
                                                                const std::optional<std::string>& launcher_visible);

}  // namespace omni::runtime
