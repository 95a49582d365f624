#include "server/generation.h"

#include <spdlog/spdlog.h>

#include "server/openai_error.h"

namespace omni::server {

GenerationRun::GenerationRun(const ServingContext& context, std::shared_ptr<Responder> responder, Callbacks callbacks)
    : context_(context), responder_(std::move(responder)), callbacks_(std::move(callbacks)) {}

std::shared_ptr<GenerationRun> GenerationRun::start(const ServingContext& context, std::shared_ptr<Responder> responder,
                                                    std::vector<runtime::GenerationRequest> requests,
                                                    Callbacks callbacks, Clock::time_point received_at) {
  auto run = std::make_shared<GenerationRun>(context, responder, std::move(callbacks));
  for (const auto& request : requests) {
    Progress progress;
    progress.request_id = request.request_id;
    run->progress_.push_back(std::move(progress));
  }
  run->unfinished_ = requests.size();
  if (context.inflight) context.inflight->acquire(requests.size());

  std::weak_ptr<GenerationRun> weak = run;
  responder->on_disconnect([weak] {
    if (auto self = weak.lock()) self->abort_all();
  });

  for (size_t i = 0; i < requests.size(); ++i) {
    context.metrics.requests_waiting.add(1);
    // The backend calls the sink on its own thread; the event is moved onto the connection's
    // executor at once so the backend never waits on formatting or the network.
    runtime::EventSink sink = [run, i](runtime::ResponseEvent event) {
      Clock::time_point at = Clock::now();
      run->responder_->run([run, i, event = std::move(event), at] { run->deliver(i, event, at); });
    };
    try {
      context.backend.submit(std::move(requests[i]), std::move(sink));
    } catch (...) {
      context.metrics.requests_waiting.add(-1);
      run->dropped_ = true;
      for (size_t j = 0; j < i; ++j) context.backend.abort(run->progress_[j].request_id);
      // The requests never submitted will not report: only the aborted ones settle the gauges
      // and give back their places.
      for (size_t j = i; j < run->progress_.size(); ++j) run->progress_[j].finished = true;
      if (context.inflight) context.inflight->release(run->progress_.size() - i);
      throw;
    }
  }
  context.metrics.request_preprocess.observe(std::chrono::duration<double>(Clock::now() - received_at).count());
  return run;
}

void GenerationRun::abort_all() {
  for (const auto& progress : progress_) context_.backend.abort(progress.request_id);
}

void GenerationRun::deliver(size_t index, const runtime::ResponseEvent& event, Clock::time_point at) {
  Progress& progress = progress_[index];
  if (progress.finished) return;
  RequestMetrics& metrics = context_.metrics;
  if (!progress.first_event) {
    progress.first_event = true;
    metrics.requests_waiting.add(-1);
    metrics.requests_running.add(1);
  }
  // Audio counts as output too: for speech, TTFT is the time to the first audio.
  if (!event.token_ids.empty() || !event.audio.empty()) {
    if (!progress.first_token) {
      progress.first_token = true;
      metrics.time_to_first_token.observe(std::chrono::duration<double>(at - started_).count());
    } else {
      metrics.inter_token_latency.observe(std::chrono::duration<double>(at - progress.last_token).count());
    }
    progress.last_token = at;
  }
  if (event.finished) {
    progress.finished = true;
    if (context_.inflight) context_.inflight->release(1);
    metrics.requests_running.add(-1);
    metrics.e2e_request_latency.observe(std::chrono::duration<double>(at - started_).count());
    metrics.prompt_tokens.add(event.prompt_tokens);
    metrics.generation_tokens.add(event.completion_tokens);
    metrics.request_prompt_tokens.observe(event.prompt_tokens);
    metrics.request_generation_tokens.observe(event.completion_tokens);
    if (event.error) {
      metrics.request_failures.add();
    } else {
      metrics.request_success(event.finish_reason.value_or("stop")).add();
    }
  }
  if (dropped_) return;
  try {
    callbacks_.on_event(index, event);
    if (event.finished && --unfinished_ == 0) {
      callbacks_.on_finished();
      metrics.response_postprocess.observe(std::chrono::duration<double>(Clock::now() - at).count());
    }
  } catch (const std::exception& e) {
    // Formatting must not take the connection's executor down; the client sees the stream end.
    spdlog::error("http: formatting the output of request {} failed: {}", progress.request_id, e.what());
    responder_->respond(
        error_response(500, error_code_name(ErrorCode::kInternal), "internal error while formatting the response"));
    responder_->end_stream();
    abort_all();
  }
}

}  // namespace omni::server
