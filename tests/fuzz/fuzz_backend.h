// A ServingBackend for the route fuzz targets: it keeps what is submitted and, on deliver(),
// answers every request at once on the calling thread (one event per choice, with logprobs when
// asked for, audio for a speech request, a 2x2 image for an image request), so one fuzz input is one complete exchange.
#pragma once

#include <string>
#include <vector>

#include "runtime/serving_backend.h"

namespace omni::fuzz {

class FuzzBackend : public runtime::ServingBackend {
 public:
  void submit(runtime::GenerationRequest request, runtime::EventSink sink) override;
  void abort(const std::string& request_id) override;
  bool healthy() const override { return true; }

  // Delivers every pending request's events (an aborted one ends with finish_reason "abort").
  void deliver();
  // Requests submitted and not yet delivered.
  size_t pending() const { return pending_.size(); }

 private:
  struct Pending {
    runtime::GenerationRequest request;
    runtime::EventSink sink;
    bool aborted = false;
  };
  std::vector<Pending> pending_;
};

}  // namespace omni::fuzz
