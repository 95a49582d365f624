#include "engine/stop_strings.h"

#include <algorithm>

namespace omni::engine {

std::optional<StopStringMatch> find_stop_string(std::string_view text, size_t num_new_bytes,
                                                std::span<const std::string> stop, bool include_stop_str_in_output) {
  if (num_new_bytes == 0) return std::nullopt;
  for (size_t i = 0; i < stop.size(); ++i) {
    const std::string& s = stop[i];
    // A match must end inside the new text, so it starts at most s.size() - 1 bytes before it.
    size_t window = num_new_bytes + s.size() - 1;
    size_t from = text.size() > window ? text.size() - window : 0;
    size_t at = text.find(s, from);
    if (at == std::string_view::npos) continue;
    StopStringMatch match{i, at};
    if (include_stop_str_in_output) {
      size_t end = at + s.size();
      match.truncate_to = end >= text.size() ? std::string_view::npos : end;
    }
    return match;
  }
  return std::nullopt;
}

size_t stop_string_holdback(std::span<const std::string> stop, bool include_stop_str_in_output) {
  if (stop.empty() || include_stop_str_in_output) return 0;
  size_t longest = 0;
  for (const std::string& s : stop) longest = std::max(longest, s.size());
  return longest - 1;
}

}  // namespace omni::engine
