#include "model/stage_durations.h"

#include <algorithm>

namespace omni::model {

void StageDurations::add(std::string_view phase, double seconds) {
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const auto& e) { return e.first == phase; });
  if (it == entries_.end()) {
    entries_.emplace_back(std::string(phase), seconds);
  } else {
    it->second += seconds;
  }
}

double StageDurations::seconds(std::string_view phase) const {
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const auto& e) { return e.first == phase; });
  return it == entries_.end() ? 0.0 : it->second;
}

Json StageDurations::to_json(std::string_view prefix) const {
  Json out = Json::object();
  for (const auto& [phase, seconds] : entries_) {
    out[prefix.empty() ? phase : std::string(prefix) + "." + phase] = seconds;
  }
  return out;
}

}  // namespace omni::model
