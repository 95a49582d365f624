#include "runtime/stale_segments.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <system_error>

namespace omni::runtime {

namespace {

// The decimal pid at the start of `text`, followed by `end`.
std::optional<pid_t> leading_pid(std::string_view text, char end) {
  pid_t pid = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), pid);
  if (ec != std::errc() || ptr == text.data() || ptr == text.data() + text.size() || *ptr != end || pid <= 0) {
    return std::nullopt;
  }
  return pid;
}

bool process_alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

}  // namespace

std::optional<pid_t> segment_owner(std::string_view name) {
  constexpr std::string_view kPrefix = "omnistage_";
  constexpr std::string_view kTensorParallel = "tp_";
  if (!name.starts_with(kPrefix)) return std::nullopt;
  name.remove_prefix(kPrefix.size());
  if (name.starts_with(kTensorParallel)) return leading_pid(name.substr(kTensorParallel.size()), '_');
  return leading_pid(name, 'x');
}

size_t sweep_stale_segments(const std::filesystem::path& dir) {
  size_t removed = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::optional<pid_t> owner = segment_owner(name);
    if (!owner || process_alive(*owner)) continue;
    std::error_code remove_error;
    if (std::filesystem::remove(it->path(), remove_error)) ++removed;
  }
  return removed;
}

}  // namespace omni::runtime
