// One HTTP request's generation, between a route handler and the ServingBackend: submits one
// backend request per prompt, hands their events to the route's formatter on the connection's
// executor (in order per backend request), aborts them all when the client goes away, and
// records the request metrics (vllm:num_requests_*, token counters, TTFT, ITL, E2E latency).
//
// Threads: start() runs on the connection's executor (inside a route handler); the callbacks run
// there too, never concurrently. abort_all() may be called from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/serving_backend.h"
#include "server/http.h"
#include "server/serving_context.h"

namespace omni::server {

class GenerationRun : public std::enable_shared_from_this<GenerationRun> {
 public:
  using Clock = std::chrono::steady_clock;

  struct Callbacks {
    // An event of the backend request for prompt `prompt_index`.
    std::function<void(size_t prompt_index, const runtime::ResponseEvent& event)> on_event;
    // Every backend request has delivered its final event.
    std::function<void()> on_finished;
  };

  // Submits every request (their ids must be unique). When a submit() throws, the requests
  // already submitted are aborted, their events are dropped, and the error propagates so that
  // the handler answers it as an ordinary HTTP error. `received_at` is when the HTTP request had
  // been read: the server's preprocessing time is measured from it.
  static std::shared_ptr<GenerationRun> start(const ServingContext& context, std::shared_ptr<Responder> responder,
                                              std::vector<runtime::GenerationRequest> requests, Callbacks callbacks,
                                              Clock::time_point received_at);

  void abort_all();

  // Use start().
  GenerationRun(const ServingContext& context, std::shared_ptr<Responder> responder, Callbacks callbacks);

 private:
  struct Progress {
    std::string request_id;
    bool first_event = false;
    bool first_token = false;
    bool finished = false;
    Clock::time_point last_token;
  };

  void deliver(size_t index, const runtime::ResponseEvent& event, Clock::time_point at);

  const ServingContext& context_;
  std::shared_ptr<Responder> responder_;
  Callbacks callbacks_;
  Clock::time_point started_ = Clock::now();
  std::vector<Progress> progress_;
  size_t unfinished_ = 0;
  bool dropped_ = false;  // a submit failed: the handler answered with its error
};

}  // namespace omni::server
