// Shared-memory segments left behind by processes that died without cleaning up (a head killed
// with SIGKILL or by the OOM killer cannot unlink its session's segments). Every /dev/shm entry
// omnistage creates names the process that owns it:
//   omnistage_<pid>x<random>_…   a head's session (connector payloads, frontend metrics files)
//   omnistage_tp_<pid>_<n>       a tensor-parallel communicator of rank 0's process
// The sweep removes those whose owner is no longer alive; a live owner's entries, and names it
// cannot attribute to a pid, are never touched. A pid reused by an unrelated process keeps its
// stale entries until that process ends too (the safe side). Processes in another PID namespace
// that share this /dev/shm are not told apart (their pids are not ours).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string_view>

namespace omni::runtime {

// The owner pid of a /dev/shm entry name (without the leading '/'), or nullopt when the name is
// not one of omnistage's.
std::optional<pid_t> segment_owner(std::string_view name);

// Unlinks every entry of `dir` (normally /dev/shm) whose owner is dead; returns how many.
size_t sweep_stale_segments(const std::filesystem::path& dir = "/dev/shm");

}  // namespace omni::runtime
