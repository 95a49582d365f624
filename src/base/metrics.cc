#include "base/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "base/error.h"

namespace omni {
namespace {

void atomic_add(std::atomic<double>& target, double amount) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + amount, std::memory_order_relaxed)) {
  }
}

bool valid_metric_name(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string escape_label_value(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string escape_help(const std::string& help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Prometheus renders +Inf/-Inf/NaN by name; integral values are written without an exponent so
// counters of tokens stay readable.
std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);
}

// `{a="x",b="y"}` plus an optional extra label (le for histogram buckets); empty when no labels.
std::string label_block(const std::vector<std::string>& names, const std::vector<std::string>& values,
                        const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += fmt::format("{}{}=\"{}\"", out.empty() ? "" : ",", names[i], escape_label_value(values[i]));
  }
  if (!extra_name.empty()) out += fmt::format("{}{}=\"{}\"", out.empty() ? "" : ",", extra_name, extra_value);
  return out.empty() ? out : "{" + out + "}";
}

std::string_view type_name(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::unique_ptr<Counter> make_metric(const Counter*, const std::vector<double>&) { return std::make_unique<Counter>(); }
std::unique_ptr<Gauge> make_metric(const Gauge*, const std::vector<double>&) { return std::make_unique<Gauge>(); }
std::unique_ptr<Histogram> make_metric(const Histogram*, const std::vector<double>& bounds) {
  return std::make_unique<Histogram>(bounds);
}

}  // namespace

void Counter::add(double amount) {
  if (amount < 0) throw_error(ErrorCode::kInvalidArgument, "a counter cannot decrease (add({}))", amount);
  atomic_add(value_, amount);
}

void Gauge::add(double amount) { atomic_add(value_, amount); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), bucket_counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  if (!std::is_sorted(bounds_.begin(), bounds_.end()) ||
      std::adjacent_find(bounds_.begin(), bounds_.end()) != bounds_.end()) {
    throw_error(ErrorCode::kInvalidArgument, "histogram bucket bounds must be strictly increasing");
  }
  for (size_t i = 0; i <= bounds_.size(); ++i) bucket_counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double value) {
  size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  bucket_counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  atomic_add(sum_, value);
  count_.fetch_add(1, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot snap;
  snap.bounds = bounds_;
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += bucket_counts_[i].load(std::memory_order_relaxed);
    snap.cumulative_counts.push_back(running);
  }
  snap.sum = sum_.load(std::memory_order_relaxed);
  // The +Inf bucket and the count must agree even while other threads observe.
  snap.count = running;
  return snap;
}

template <typename Metric>
Metric& MetricFamily<Metric>::with(const std::vector<std::string>& label_values) {
  if (label_values.size() != label_names_.size()) {
    throw_error(ErrorCode::kInvalidArgument, "metric {} has {} label(s) ({}), got {} value(s)", name_,
                label_names_.size(), fmt::join(label_names_, ", "), label_values.size());
  }
  std::lock_guard lock(mutex_);
  auto& slot = series_[label_values];
  if (!slot) slot = make_metric(static_cast<const Metric*>(nullptr), bounds_);
  return *slot;
}

template class MetricFamily<Counter>;
template class MetricFamily<Gauge>;
template class MetricFamily<Histogram>;

MetricsRegistry::Entry& MetricsRegistry::find_or_add(MetricType type, const std::string& name, const std::string& help,
                                                     const std::vector<std::string>& label_names,
                                                     const std::vector<double>& bounds) {
  if (!valid_metric_name(name)) {
    throw_error(ErrorCode::kInvalidArgument, "metric name '{}' is not a valid Prometheus name", name);
  }
  for (const auto& label : label_names) {
    if (!valid_metric_name(label) || label.find(':') != std::string::npos || label == "le") {
      throw_error(ErrorCode::kInvalidArgument, "metric {}: label name '{}' is not allowed", name, label);
    }
  }
  std::lock_guard lock(mutex_);
  auto it = families_.find(name);
  if (it != families_.end()) {
    Entry& entry = it->second;
    auto same = [&](const auto& family) {
      return family->help_ == help && family->label_names_ == label_names && family->bounds_ == bounds;
    };
    bool matches =
        entry.type == type && ((entry.counters && same(entry.counters)) || (entry.gauges && same(entry.gauges)) ||
                               (entry.histograms && same(entry.histograms)));
    if (!matches) {
      throw_error(ErrorCode::kInvalidArgument,
                  "metric {} is already registered with a different type, help, labels or buckets", name);
    }
    return entry;
  }
  Entry entry{type, nullptr, nullptr, nullptr};
  switch (type) {
    case MetricType::kCounter:
      entry.counters.reset(new MetricFamily<Counter>(name, help, label_names, {}));
      break;
    case MetricType::kGauge:
      entry.gauges.reset(new MetricFamily<Gauge>(name, help, label_names, {}));
      break;
    case MetricType::kHistogram:
      // Validates the bounds once, here, rather than at the first observation.
      static_cast<void>(Histogram{bounds});
      entry.histograms.reset(new MetricFamily<Histogram>(name, help, label_names, bounds));
      break;
  }
  order_.push_back(name);
  return families_.emplace(name, std::move(entry)).first->second;
}

MetricFamily<Counter>& MetricsRegistry::counter(const std::string& name, const std::string& help,
                                                const std::vector<std::string>& label_names) {
  return *find_or_add(MetricType::kCounter, name, help, label_names, {}).counters;
}

MetricFamily<Gauge>& MetricsRegistry::gauge(const std::string& name, const std::string& help,
                                            const std::vector<std::string>& label_names) {
  return *find_or_add(MetricType::kGauge, name, help, label_names, {}).gauges;
}

MetricFamily<Histogram>& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                                    const std::vector<std::string>& label_names,
                                                    const std::vector<double>& bounds) {
  return *find_or_add(MetricType::kHistogram, name, help, label_names, bounds).histograms;
}

std::string MetricsRegistry::render_prometheus() const {
  std::string out;
  std::lock_guard lock(mutex_);
  for (const std::string& name : order_) {
    const Entry& entry = families_.at(name);
    auto header = [&](const auto& family) {
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escape_help(family.help_), name, type_name(entry.type));
    };
    auto simple = [&](const auto& family) {
      header(family);
      std::lock_guard series_lock(family.mutex_);
      for (const auto& [labels, metric] : family.series_) {
        out += fmt::format("{}{} {}\n", name, label_block(family.label_names_, labels), format_value(metric->value()));
      }
    };
    if (entry.counters) simple(*entry.counters);
    if (entry.gauges) simple(*entry.gauges);
    if (entry.histograms) {
      const auto& family = *entry.histograms;
      header(family);
      std::lock_guard series_lock(family.mutex_);
      for (const auto& [labels, metric] : family.series_) {
        Histogram::Snapshot snap = metric->snapshot();
        for (size_t i = 0; i < snap.bounds.size(); ++i) {
          out += fmt::format("{}_bucket{} {}\n", name,
                             label_block(family.label_names_, labels, "le", format_value(snap.bounds[i])),
                             snap.cumulative_counts[i]);
        }
        out +=
            fmt::format("{}_bucket{} {}\n", name, label_block(family.label_names_, labels, "le", "+Inf"), snap.count);
        out += fmt::format("{}_sum{} {}\n", name, label_block(family.label_names_, labels), format_value(snap.sum));
        out += fmt::format("{}_count{} {}\n", name, label_block(family.label_names_, labels), snap.count);
      }
    }
  }
  return out;
}

std::string merge_prometheus_texts(const std::vector<std::string>& texts) {
  struct Family {
    std::string help;                 // the whole "# HELP" line
    std::string type;                 // the whole "# TYPE" line
    std::vector<std::string> series;  // "name{labels}", in first-seen order
    std::map<std::string, double> values;
  };
  std::vector<std::string> order;
  std::map<std::string, Family> families;
  auto family = [&](const std::string& name) -> Family& {
    auto [it, added] = families.try_emplace(name);
    if (added) order.push_back(name);
    return it->second;
  };
  for (const std::string& text : texts) {
    std::string current;  // the family of the latest TYPE line
    size_t begin = 0;
    while (begin < text.size()) {
      size_t end = text.find('\n', begin);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(begin, end - begin);
      begin = end + 1;
      if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) {
        const size_t name_end = line.find(' ', 7);
        const std::string name = line.substr(7, name_end == std::string::npos ? std::string::npos : name_end - 7);
        Family& f = family(name);
        std::string& kept = line[2] == 'H' ? f.help : f.type;
        if (kept.empty()) kept = line;
        if (line[2] == 'T') current = name;
        continue;
      }
      if (line.empty() || line[0] == '#') continue;
      const size_t space = line.rfind(' ');
      if (space == std::string::npos || space == 0) continue;
      const std::string key = line.substr(0, space);
      const double value = std::strtod(line.c_str() + space + 1, nullptr);
      const std::string name = key.substr(0, key.find('{'));
      Family& f = family(current.empty() || !name.starts_with(current) ? name : current);
      auto [it, added] = f.values.try_emplace(key, 0.0);
      if (added) f.series.push_back(key);
      it->second += value;
    }
  }
  std::string out;
  for (const std::string& name : order) {
    const Family& f = families.at(name);
    if (!f.help.empty()) out += f.help + "\n";
    if (!f.type.empty()) out += f.type + "\n";
    for (const std::string& key : f.series) out += fmt::format("{} {}\n", key, format_value(f.values.at(key)));
  }
  return out;
}

}  // namespace omni
