// The server's own account of where a benchmark's time went, read from its GET /metrics (Prometheus
// text) before and after the run: for every histogram whose name starts with a prefix, the
// observations the run added and their mean. `omnistage serve` exposes its time outside the engine
// this way (omnistage:http_request_preprocess_seconds, omnistage:stage_hop_seconds…).
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "base/json.h"

namespace omni::cli::bench {

struct HistogramTotals {
  double sum = 0;
  double count = 0;
};

// Series name with its labels (`name{label="v"}`) -> totals, for every histogram `name_sum` /
// `name_count` pair in `prometheus_text` whose name starts with `prefix`. Lines that are not
// samples (comments, blank, malformed) are skipped.
std::map<std::string, HistogramTotals> histogram_totals(std::string_view prometheus_text, std::string_view prefix);

// {series: {"count": n, "mean_ms": m}} for the series that gained observations between the two
// readings (a series absent before counts from zero).
Json histogram_deltas(const std::map<std::string, HistogramTotals>& before,
                      const std::map<std::string, HistogramTotals>& after);

}  // namespace omni::cli::bench
