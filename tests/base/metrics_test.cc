#include "base/metrics.h"

#include <gtest/gtest.h>

#include <thread>

#include "base/error.h"

namespace omni {
namespace {

TEST(Metrics, RendersCountersGaugesAndHistogramsInPrometheusTextFormat) {
  MetricsRegistry registry;
  registry.counter("vllm:prompt_tokens_total", "Prompt tokens.", {"model_name"}).with({"m"}).add(5);
  registry.gauge("vllm:num_requests_running", "Running.", {"model_name"}).with({"m"}).set(2);
  Histogram& latency = registry.histogram("lat_seconds", "Latency.", {"stage"}, {0.1, 1.0}).with({"0"});
  latency.observe(0.05);
  latency.observe(0.1);  // on a bound: counts into that bucket (le)
  latency.observe(3.0);
  EXPECT_EQ(registry.render_prometheus(),
            "# HELP vllm:prompt_tokens_total Prompt tokens.\n"
            "# TYPE vllm:prompt_tokens_total counter\n"
            "vllm:prompt_tokens_total{model_name=\"m\"} 5\n"
            "# HELP vllm:num_requests_running Running.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            "vllm:num_requests_running{model_name=\"m\"} 2\n"
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{stage=\"0\",le=\"0.1\"} 2\n"
            "lat_seconds_bucket{stage=\"0\",le=\"1\"} 2\n"
            "lat_seconds_bucket{stage=\"0\",le=\"+Inf\"} 3\n"
            "lat_seconds_sum{stage=\"0\"} 3.15\n"
            "lat_seconds_count{stage=\"0\"} 3\n");
}

TEST(Metrics, MergedExpositionsSumEachSeriesAndNameEachFamilyOnce) {
  MetricsRegistry a;
  MetricsRegistry b;
  for (MetricsRegistry* r : {&a, &b}) {
    r->counter("requests_total", "Requests.", {"route"}).with({"/v1/completions"}).add(r == &a ? 2 : 3);
    r->histogram("latency_seconds", "Latency.", {}, {0.1, 1.0}).with({}).observe(r == &a ? 0.05 : 0.5);
  }
  a.counter("frontend_total", "Per frontend.", {"frontend"}).with({"0"}).add(4);
  b.counter("frontend_total", "Per frontend.", {"frontend"}).with({"1"}).add(5);
  b.gauge("only_in_b", "A gauge.", {}).with({}).set(7);

  const std::string merged = merge_prometheus_texts({a.render_prometheus(), b.render_prometheus()});
  EXPECT_EQ(merged,
            "# HELP requests_total Requests.\n"
            "# TYPE requests_total counter\n"
            "requests_total{route=\"/v1/completions\"} 5\n"
            "# HELP latency_seconds Latency.\n"
            "# TYPE latency_seconds histogram\n"
            "latency_seconds_bucket{le=\"0.1\"} 1\n"
            "latency_seconds_bucket{le=\"1\"} 2\n"
            "latency_seconds_bucket{le=\"+Inf\"} 2\n"
            "latency_seconds_sum 0.55\n"
            "latency_seconds_count 2\n"
            "# HELP frontend_total Per frontend.\n"
            "# TYPE frontend_total counter\n"
            "frontend_total{frontend=\"0\"} 4\n"
            "frontend_total{frontend=\"1\"} 5\n"
            "# HELP only_in_b A gauge.\n"
            "# TYPE only_in_b gauge\n"
            "only_in_b 7\n");
  EXPECT_EQ(merge_prometheus_texts({a.render_prometheus()}), a.render_prometheus()) << "one process: unchanged";
}

TEST(Metrics, EscapesLabelValuesAndKeepsOneSeriesPerLabelSet) {
  MetricsRegistry registry;
  auto& family = registry.counter("requests_total", "Requests.", {"reason"});
  family.with({"a\"b\\c\nd"}).add();
  family.with({"x"}).add(2);
  family.with({"x"}).add(3);
  std::string text = registry.render_prometheus();
  EXPECT_NE(text.find("requests_total{reason=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("requests_total{reason=\"x\"} 5\n"), std::string::npos) << text;
}

TEST(Metrics, SameRegistrationReturnsTheSameFamilyAndConflictsAreErrors) {
  MetricsRegistry registry;
  auto& a = registry.counter("c_total", "C.", {"l"});
  EXPECT_EQ(&a, &registry.counter("c_total", "C.", {"l"}));
  EXPECT_THROW(registry.gauge("c_total", "C.", {"l"}), Error);
  EXPECT_THROW(registry.counter("c_total", "C.", {"other"}), Error);
  EXPECT_THROW(registry.counter("bad name", "x", {}), Error);
  EXPECT_THROW(registry.histogram("h", "H.", {}, {1.0, 0.5}), Error);
  EXPECT_THROW(a.with({"1", "2"}), Error);
  EXPECT_THROW(a.with({"1"}).add(-1), Error);
}

TEST(Metrics, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry registry;
  Counter& counter = registry.counter("n_total", "N.", {}).with({});
  Histogram& histogram = registry.histogram("h", "H.", {}, {0.5}).with({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        counter.add();
        histogram.observe(1.0);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(counter.value(), 40000);
  EXPECT_EQ(histogram.snapshot().count, 40000u);
  EXPECT_EQ(histogram.snapshot().sum, 40000.0);
}

}  // namespace
}  // namespace omni
