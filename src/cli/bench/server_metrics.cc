#include "cli/bench/server_metrics.h"

#include <cstdlib>

namespace omni::cli::bench {

std::map<std::string, HistogramTotals> histogram_totals(std::string_view text, std::string_view prefix) {
  std::map<std::string, HistogramTotals> totals;
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    if (line.empty() || line.front() == '#' || line.substr(0, prefix.size()) != prefix) continue;
    size_t space = line.rfind(' ');
    if (space == std::string_view::npos) continue;
    std::string_view series = line.substr(0, space);
    std::string value(line.substr(space + 1));
    char* parsed_end = nullptr;
    double number = std::strtod(value.c_str(), &parsed_end);
    if (parsed_end == value.c_str()) continue;
    size_t brace = series.find('{');
    std::string_view name = series.substr(0, brace);
    std::string_view labels = brace == std::string_view::npos ? std::string_view() : series.substr(brace);
    for (std::string_view suffix : {std::string_view("_sum"), std::string_view("_count")}) {
      if (name.size() <= suffix.size() || name.substr(name.size() - suffix.size()) != suffix) continue;
      HistogramTotals& entry = totals[std::string(name.substr(0, name.size() - suffix.size())) + std::string(labels)];
      (suffix == "_sum" ? entry.sum : entry.count) = number;
    }
  }
  return totals;
}

Json histogram_deltas(const std::map<std::string, HistogramTotals>& before,
                      const std::map<std::string, HistogramTotals>& after) {
  Json out = Json::object();
  for (const auto& [series, now] : after) {
    HistogramTotals then;
    if (auto it = before.find(series); it != before.end()) then = it->second;
    double count = now.count - then.count;
    if (count <= 0) continue;
    out[series] = {{"count", count}, {"mean_ms", (now.sum - then.sum) / count * 1000.0}};
  }
  return out;
}

}  // namespace omni::cli::bench
