#include "server/request_metrics.h"

#include <vector>

namespace omni::server {
namespace {

// vLLM's buckets (vllm/v1/metrics/loggers.py), so that histograms compare across servers.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                         0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kE2eBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                         30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kTokenCountBuckets = {1,    2,    5,    10,    20,    50,    100,    200,   500,
                                                1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000};
// The server's own share of a request is sub-millisecond when idle: finer buckets than vLLM's.
const std::vector<double> kServerTimeBuckets = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                0.01,    0.025,  0.05,    0.1,    0.25,  0.5,    1.0};

}  // namespace

RequestMetrics::RequestMetrics(MetricsRegistry& registry, const std::string& model_name)
    : requests_waiting(
          registry.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", {"model_name"})
              .with({model_name})),
      requests_running(
          registry.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", {"model_name"})
              .with({model_name})),
      prompt_tokens(registry.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", {"model_name"})
                        .with({model_name})),
      generation_tokens(
          registry.counter("vllm:generation_tokens_total", "Number of generation tokens processed.", {"model_name"})
              .with({model_name})),
      time_to_first_token(registry
                              .histogram("vllm:time_to_first_token_seconds",
                                         "Histogram of time to first token in seconds.", {"model_name"}, kTtftBuckets)
                              .with({model_name})),
      inter_token_latency(registry
                              .histogram("vllm:inter_token_latency_seconds",
                                         "Histogram of inter-token latency in seconds.", {"model_name"}, kItlBuckets)
                              .with({model_name})),
      e2e_request_latency(registry
                              .histogram("vllm:e2e_request_latency_seconds",
                                         "Histogram of e2e request latency in seconds.", {"model_name"}, kE2eBuckets)
                              .with({model_name})),
      request_prompt_tokens(registry
                                .histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                                           {"model_name"}, kTokenCountBuckets)
                                .with({model_name})),
      request_generation_tokens(registry
                                    .histogram("vllm:request_generation_tokens",
                                               "Number of generation tokens processed.", {"model_name"},
                                               kTokenCountBuckets)
                                    .with({model_name})),
      request_failures(registry
                           .counter("omnistage:request_failures_total", "Number of requests that ended with an error.",
                                    {"model_name"})
                           .with({model_name})),
      request_preprocess(registry
                             .histogram("omnistage:http_request_preprocess_seconds",
                                        "Server time from a request read to its backend requests submitted.",
                                        {"model_name"}, kServerTimeBuckets)
                             .with({model_name})),
      response_postprocess(registry
                               .histogram("omnistage:http_response_postprocess_seconds",
                                          "Server time from the backend's final event to the response written.",
                                          {"model_name"}, kServerTimeBuckets)
                               .with({model_name})),
      success_(registry.counter("vllm:request_success_total", "Count of successfully processed requests.",
                                {"model_name", "finished_reason"})),
      model_name_(model_name) {}

Counter& RequestMetrics::request_success(const std::string& finished_reason) {
  return success_.with({model_name_, finished_reason});
}

}  // namespace omni::server
