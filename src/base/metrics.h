// A small metrics registry (counters, gauges, histograms with labels) rendered in the Prometheus
// text exposition format (version 0.0.4), for GET /metrics.
//
// The registry lives in base/ so that every layer can add its own series to the one registry the
// serve command owns (the HTTP server its vllm:* request series, the orchestrator its per-stage
// series labelled `stage`).
//
// Threads: every method may be called from any thread. Recording (add, set, observe) is lock-free;
// registering a family and looking up a label set take a mutex. References returned by the
// registry and by a family stay valid for the registry's lifetime.
// Errors: registering a name twice with a different type, help text, label names or buckets, or
// looking up a label set of the wrong size, throws omni::Error(kInvalidArgument) naming the metric.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace omni {

// A value that only goes up (requests served, tokens generated).
class Counter {
 public:
  void add(double amount = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down (requests running now).
class Gauge {
 public:
  void set(double value) { value_.store(value, std::memory_order_relaxed); }
  void add(double amount);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Observations counted into fixed buckets (latencies, lengths). Bucket i counts observations
// <= bounds[i]; observations above the last bound only count towards +Inf.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative_counts;  // one per bound, then +Inf (== count)
    double sum = 0.0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> bucket_counts_;  // per bucket, not cumulative; last is +Inf
  std::atomic<double> sum_{0.0};
  std::atomic<uint64_t> count_{0};
};

enum class MetricType { kCounter, kGauge, kHistogram };

// All series of one metric name, one per combination of label values.
template <typename Metric>
class MetricFamily {
 public:
  // The series for `label_values`, in the order of the family's label names; created at zero on
  // first use.
  Metric& with(const std::vector<std::string>& label_values);

 private:
  friend class MetricsRegistry;
  MetricFamily(std::string name, std::string help, std::vector<std::string> label_names, std::vector<double> bounds)
      : name_(std::move(name)),
        help_(std::move(help)),
        label_names_(std::move(label_names)),
        bounds_(std::move(bounds)) {}

  std::string name_;
  std::string help_;
  std::vector<std::string> label_names_;
  std::vector<double> bounds_;  // histograms only
  mutable std::mutex mutex_;
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> series_;
};

class MetricsRegistry {
 public:
  // Registers a family, or returns the existing one when the same name was registered with the
  // same type, help, label names (and buckets). Names follow Prometheus rules ([a-zA-Z_:][a-zA-Z0-9_:]*);
  // counters carry their `_total` suffix in `name`.
  MetricFamily<Counter>& counter(const std::string& name, const std::string& help,
                                 const std::vector<std::string>& label_names);
  MetricFamily<Gauge>& gauge(const std::string& name, const std::string& help,
                             const std::vector<std::string>& label_names);
  MetricFamily<Histogram>& histogram(const std::string& name, const std::string& help,
                                     const std::vector<std::string>& label_names, const std::vector<double>& bounds);

  // Every family in registration order, each series in label order.
  std::string render_prometheus() const;

 private:
  struct Entry {
    MetricType type;
    std::unique_ptr<MetricFamily<Counter>> counters;
    std::unique_ptr<MetricFamily<Gauge>> gauges;
    std::unique_ptr<MetricFamily<Histogram>> histograms;
  };
  Entry& find_or_add(MetricType type, const std::string& name, const std::string& help,
                     const std::vector<std::string>& label_names, const std::vector<double>& bounds);

  mutable std::mutex mutex_;
  std::vector<std::string> order_;
  std::map<std::string, Entry> families_;
};

// Merges the expositions of several processes' registries (render_prometheus() of each API
// frontend) into one, as Prometheus client libraries do in multi-process mode: the samples of a
// series (same name and labels) are summed over the processes — counters, histogram buckets, sums
// and counts, and gauges alike — and each family keeps the HELP and TYPE of its first appearance,
// families and series in the order they first appear. Series that carry a per-process label (e.g.
// frontend) stay apart. Lines that are not a sample, a HELP or a TYPE are dropped.
std::string merge_prometheus_texts(const std::vector<std::string>& texts);

}  // namespace omni
