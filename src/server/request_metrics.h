// The request-level series of GET /metrics, under vLLM's names so that dashboards built for
// vLLM work unchanged (label model_name). Registered in a registry the caller owns, which other
// layers add their own series to.
//
// Threads: the metric references may be used from any thread.
#pragma once

#include <string>

#include "base/metrics.h"

namespace omni::server {

struct RequestMetrics {
  RequestMetrics(MetricsRegistry& registry, const std::string& model_name);

  // Requests whose first output has not arrived yet (queued or in prefill somewhere in the
  // pipeline), and requests producing output. The server only sees its backend, so this is the
  // split the API boundary can observe.
  Gauge& requests_waiting;
  Gauge& requests_running;
  Counter& prompt_tokens;
  Counter& generation_tokens;
  Histogram& time_to_first_token;
  Histogram& inter_token_latency;
  Histogram& e2e_request_latency;
  Histogram& request_prompt_tokens;
  Histogram& request_generation_tokens;
  // vllm:request_success_total{model_name, finished_reason}.
  Counter& request_success(const std::string& finished_reason);
  // omnistage:request_failures_total: requests that ended with an error.
  Counter& request_failures;
  // The API server's own time per generation request, outside the backend:
  // omnistage:http_request_preprocess_seconds, from the whole request read to its backend
  // request(s) submitted (JSON parsing, validation, chat template, tokenization), and
  // omnistage:http_response_postprocess_seconds, from the backend handing over the final event
  // to the response's last bytes handed to the socket (event hop onto the connection, formatting).
  Histogram& request_preprocess;
  Histogram& response_postprocess;

 private:
  MetricFamily<Counter>& success_;
  std::string model_name_;
};

}  // namespace omni::server
