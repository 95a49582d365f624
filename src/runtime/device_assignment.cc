#include "runtime/device_assignment.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "base/error.h"

namespace omni::runtime {

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) items.push_back(item);
    start = end + 1;
  }
  return items;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::vector<std::string> map_stage_devices(int stage_id, const std::string& devices,
                                           const std::optional<std::string>& launcher_visible) {
  std::vector<std::string> ids = split_list(devices);
  for (const std::string& id : ids) {
    if (!all_digits(id)) {
      throw_error(ErrorCode::kInvalidConfig, "stage {}: devices entry '{}' is not a device index (devices: '{}')",
                  stage_id, id, devices);
    }
  }
  if (!launcher_visible || ids.empty()) return ids;
  std::vector<std::string> visible = split_list(*launcher_visible);
  std::vector<std::string> mapped;
  std::vector<std::string> outside;
  for (const std::string& id : ids) {
    size_t index = std::stoul(id);
    if (index < visible.size()) {
      mapped.push_back(visible[index]);
    } else {
      outside.push_back(id);
    }
  }
  if (mapped.empty()) {
    // Every id outside the visible list: the launcher already handed out physical ids.
    if (!visible.empty()) return ids;
    throw_error(ErrorCode::kInvalidConfig, "stage {}: none of the devices '{}' is visible (CUDA_VISIBLE_DEVICES='{}')",
                stage_id, devices, *launcher_visible);
  }
  if (!outside.empty()) {
    spdlog::warn("stage {}: devices {} are not in CUDA_VISIBLE_DEVICES='{}'; using {}", stage_id,
                 fmt::join(outside, ","), *launcher_visible, fmt::join(mapped, ","));
  }
  return mapped;
}

std::vector<std::vector<std::string>> split_devices_for_replicas(int stage_id, const std::vector<std::string>& devices,
                                                                 int replicas, int per_replica) {
  std::vector<std::vector<std::string>> result(replicas);
  if (devices.empty()) return result;
  size_t count = devices.size();
  size_t pool = static_cast<size_t>(replicas) * per_replica;
  if (count == pool) {
    auto slice = static_cast<std::ptrdiff_t>(per_replica);
    for (int r = 0; r < replicas; ++r) result[r].assign(devices.begin() + r * slice, devices.begin() + (r + 1) * slice);
    return result;
  }
  if (count == static_cast<size_t>(per_replica)) {
    for (const std::string& id : devices) {
      if (std::stoul(id) >= static_cast<size_t>(per_replica)) {
        throw_error(ErrorCode::kInvalidConfig,
                    "stage {}: as a template for {} replicas, devices entries must be below {}, found {}", stage_id,
                    replicas, per_replica, id);
      }
    }
    for (int r = 0; r < replicas; ++r) {
      for (const std::string& id : devices)
        result[r].push_back(std::to_string(static_cast<size_t>(r) * per_replica + std::stoul(id)));
    }
    return result;
  }
  throw_error(ErrorCode::kInvalidConfig,
              "stage {}: {} devices for {} replicas of {} devices each; need either {} (template) or {} (pool)",
              stage_id, count, replicas, per_replica, per_replica, pool);
}

std::vector<std::optional<std::string>> replica_visible_devices(int stage_id, const std::string& devices, int replicas,
                                                                int per_replica,
                                                                const std::optional<std::string>& launcher_visible) {
  std::vector<std::optional<std::string>> result(replicas);
  if (split_list(devices).empty()) return result;
  // Template mode hands replicas indices beyond the list, so replicas split indices before mapping.
  std::vector<std::string> indices = map_stage_devices(stage_id, devices, std::nullopt);
  auto slices = split_devices_for_replicas(stage_id, indices, replicas, per_replica);
  for (int r = 0; r < replicas; ++r) {
    result[r] = fmt::format(
        "{}",
        fmt::join(map_stage_devices(stage_id, fmt::format("{}", fmt::join(slices[r], ",")), launcher_visible), ","));
  }
  return result;
}

}  // namespace omni::runtime
