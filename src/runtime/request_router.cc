#include "runtime/request_router.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

namespace omni::runtime {

RequestRouter::RequestRouter(const PipelineSpec& pipeline, ReplicaSet& replicas, const ConnectorContext& context,
                             int edge_inflight_limit, RouterLinks links, RouterMetrics metrics)
    : pipeline_(pipeline),
      replicas_(replicas),
      edge_inflight_limit_(edge_inflight_limit),
      links_(std::move(links)),
      metrics_(std::move(metrics)) {
  if (edge_inflight_limit_ < 1) {
    throw_error(ErrorCode::kInvalidConfig, "edge in-flight limit must be at least 1, not {}", edge_inflight_limit_);
  }
  for (const StageSpec& stage : pipeline_.stages) {
    for (int from : stage.input_sources) {
      edge_connectors_[{from, stage.stage_id}] = make_connector(edge_connector(stage, from), context);
      edges_[{from, stage.stage_id}];
    }
  }
}

size_t RequestRouter::waiting(int stage_id) const {
  auto it = waiting_.find(stage_id);
  return it == waiting_.end() ? 0 : it->second.size();
}

void RequestRouter::start(GenerationRequest generation, EventSink sink, RequestPlan plan, Clock::time_point queued) {
  Request request;
  request.id = generation.request_id;
  request.sink = std::move(sink);
  request.plan = std::move(plan);
  request.prompt = std::move(generation.prompt_token_ids);
  request.additional_information = std::move(generation.additional_information);
  request.prompt_tokens = static_cast<int>(request.prompt.size());
  std::string id = request.id;
  int entry = request.plan.stages.front();
  requests_.emplace(id, std::move(request));
  Request& stored = requests_.at(id);
  submit_to_stage(stored, entry, stored.prompt, {});
  if (metrics_.dispatch_time) {
    metrics_.dispatch_time->observe(std::chrono::duration<double>(Clock::now() - queued).count());
  }
}

void RequestRouter::discard(const PayloadRef& ref) {
  auto it = edge_connectors_.find({ref.address.from_stage, ref.address.to_stage});
  if (it != edge_connectors_.end()) it->second->discard(ref);
}

void RequestRouter::on_output(Replica& replica, OutputMessage& output) {
  auto it = requests_.find(output.request_id);
  StageProgress* progress = nullptr;
  if (it != requests_.end()) {
    auto stage = it->second.stages.find(replica.stage_id);
    if (stage != it->second.stages.end() && stage->second.replica == replica.index && !stage->second.finished) {
      progress = &stage->second;
    }
  }
  if (!progress) {  // the request ended (aborted, failed) while this output was on its way
    for (const PayloadRef& ref : output.payloads) discard(ref);
    return;
  }
  if (output.stage_seconds && !metrics_.hop_time.empty()) {
    double head_seconds = std::chrono::duration<double>(Clock::now() - progress->submitted).count();
    metrics_.hop_time[replica.stage_id]->observe(std::max(0.0, head_seconds - *output.stage_seconds));
  }
  Request& request = it->second;
  const std::string id = request.id;
  const std::vector<int> consumers = request.plan.consumers.at(replica.stage_id);
  std::map<int, std::vector<PayloadRef>> chunk_payloads;  // for async_chunk consumers
  for (PayloadRef& ref : output.payloads) {
    if (std::find(consumers.begin(), consumers.end(), ref.address.to_stage) != consumers.end()) {
      if (pipeline_.stages[ref.address.to_stage].async_chunk) chunk_payloads[ref.address.to_stage].push_back(ref);
      progress->payloads.push_back(std::move(ref));
    } else {
      discard(ref);
    }
  }
  progress->tokens.insert(progress->tokens.end(), output.token_ids.begin(), output.token_ids.end());
  bool finished = output.finish_reason.has_value() && !output.more_choices;
  std::vector<int32_t> chunk_tokens = output.token_ids;
  if (replica.stage_id == request.plan.final_stage) {
    request.completion_tokens += static_cast<int>(output.token_ids.size());
    ResponseEvent event;
    event.index = output.index;
    event.token_ids = std::move(output.token_ids);
    event.text = std::move(output.text);
    event.logprobs = std::move(output.logprobs);
    event.audio = std::move(output.audio);
    event.audio_sample_rate = output.audio_sample_rate;
    event.finish_reason = output.finish_reason;
    event.finished = finished;
    event.prompt_tokens = request.prompt_tokens;
    event.completion_tokens = request.completion_tokens;
    deliver(request.sink, std::move(event));
  }
  if (finished) {
    progress->finished = true;
    replicas_.release(replica, id);
    release_edges_into(request, replica.stage_id);
    if (replica.stage_id == request.plan.final_stage) {
      close_request(id);
      return;
    }
  }
  // Forwarding can end the request (no live replica), so it is looked up again each time.
  for (int consumer : consumers) {
    auto live = requests_.find(id);
    if (live == requests_.end()) return;
    if (pipeline_.stages[consumer].async_chunk) {
      stream_chunk(id, consumer, InputChunkMessage{id, chunk_tokens, chunk_payloads[consumer], finished});
    } else if (finished && sources_finished(live->second, consumer)) {
      forward(id, consumer);
    }
  }
}

// async_chunk: hands one output of the consumer's source to it, starting it on the first one.
void RequestRouter::stream_chunk(const std::string& id, int stage_id, InputChunkMessage chunk) {
  Request& request = requests_.at(id);
  if (auto started = request.stages.find(stage_id); started != request.stages.end()) {
    if (!started->second.finished) links_.send(replicas_.at(stage_id, started->second.replica), std::move(chunk));
    return;
  }
  auto& buffered = request.buffered_chunks[stage_id];
  buffered.push_back(std::move(chunk));
  if (buffered.size() == 1) forward(id, stage_id);
}

// Starts an async_chunk consumer with the chunks that reached the head before it could start.
void RequestRouter::start_streaming(Request& request, int stage_id) {
  std::deque<InputChunkMessage> chunks = std::move(request.buffered_chunks[stage_id]);
  request.buffered_chunks.erase(stage_id);
  InputChunkMessage& first = chunks.front();
  const std::string id = request.id;
  submit_to_stage(request, stage_id, std::move(first.token_ids), std::move(first.payloads), !first.last);
  chunks.pop_front();
  for (InputChunkMessage& chunk : chunks) {
    if (!live(id)) return;
    stream_chunk(id, stage_id, std::move(chunk));
  }
}

bool RequestRouter::sources_finished(const Request& request, int stage_id) const {
  for (int source : pipeline_.stages[stage_id].input_sources) {
    auto it = request.stages.find(source);
    if (it == request.stages.end() || !it->second.finished) return false;
  }
  return true;
}

bool RequestRouter::edges_have_room(int stage_id) const {
  for (int source : pipeline_.stages[stage_id].input_sources) {
    if (edges_.at({source, stage_id}).in_flight >= edge_inflight_limit_) return false;
  }
  return true;
}

// Moves a request into `stage_id` (all its sources finished, or for async_chunk its source's
// first output arrived), or queues it behind a full edge.
void RequestRouter::forward(const std::string& id, int stage_id) {
  if (!edges_have_room(stage_id)) {
    waiting_[stage_id].push_back(id);
    return;
  }
  Request& request = requests_.at(id);
  const StageSpec& stage = pipeline_.stages[stage_id];
  for (int source : stage.input_sources) {
    edges_.at({source, stage_id}).in_flight++;
    request.held_edges.emplace_back(source, stage_id);
  }
  if (stage.async_chunk) {
    start_streaming(request, stage_id);
    return;
  }
  std::vector<PayloadRef> inputs;
  for (int source : stage.input_sources) {
    for (const PayloadRef& ref : request.stages.at(source).payloads) {
      if (ref.address.to_stage == stage_id) inputs.push_back(ref);
    }
  }
  submit_to_stage(request, stage_id, request.stages.at(stage.input_sources.front()).tokens, std::move(inputs));
}

// Frees the edges into `stage_id` (every edge for -1) that `request` holds, then lets the
// requests waiting on them move.
void RequestRouter::release_edges_into(Request& request, int stage_id) {
  std::set<int> freed;
  for (auto it = request.held_edges.begin(); it != request.held_edges.end();) {
    if (stage_id < 0 || it->second == stage_id) {
      edges_.at(*it).in_flight--;
      freed.insert(it->second);
      it = request.held_edges.erase(it);
    } else {
      ++it;
    }
  }
  for (int stage : freed) pump_waiting(stage);
}

void RequestRouter::pump_waiting(int stage_id) {
  auto& queue = waiting_[stage_id];
  while (!queue.empty() && edges_have_room(stage_id)) {
    std::string id = queue.front();
    queue.pop_front();
    if (live(id)) forward(id, stage_id);
  }
}

// Sends the request to a replica of `stage_id`; on failure the request ends with the error.
void RequestRouter::submit_to_stage(Request& request, int stage_id, std::vector<int32_t> prompt,
                                    std::vector<PayloadRef> inputs, bool input_open) {
  int index = replicas_.pick(stage_id);
  if (index < 0) {
    end_request(request.id, Error(ErrorCode::kUnavailable, fmt::format("stage {} has no live replica", stage_id)));
    return;
  }
  Replica& replica = replicas_.at(stage_id, index);
  StageProgress& progress = request.stages[stage_id];
  progress.replica = index;
  progress.submitted = Clock::now();
  replicas_.assign(replica, request.id);
  SubmitMessage message{request.id,
                        std::move(prompt),
                        request.plan.sampling_params.at(stage_id),
                        std::move(inputs),
                        request.plan.consumers.at(stage_id),
                        input_open,
                        request.additional_information};
  if (!links_.send(replica, message)) links_.replica_failed(replica, "its control connection is gone");
}

void RequestRouter::on_error(Replica& replica, const ErrorMessage& error) {
  auto it = requests_.find(error.request_id);
  if (it == requests_.end()) return;
  auto stage = it->second.stages.find(replica.stage_id);
  if (stage == it->second.stages.end() || stage->second.replica != replica.index) return;
  std::string prefix = fmt::format("stage {}", replica.stage_id);
  std::string message =
      error.message.rfind(prefix, 0) == 0 ? error.message : fmt::format("{}: {}", prefix, error.message);
  stage->second.finished = true;  // the worker already dropped it
  replicas_.release(replica, error.request_id);
  end_request(error.request_id, Error(error.code, message));
}

void RequestRouter::end_request(const std::string& id, std::optional<Error> error) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Request& request = it->second;
  for (auto& [stage_id, progress] : request.stages) {
    if (progress.finished) continue;
    Replica& replica = replicas_.at(stage_id, progress.replica);
    replicas_.release(replica, id);
    if (replica.phase == ReplicaPhase::kReady) links_.send(replica, AbortMessage{id});
  }
  ResponseEvent event;
  if (error) {
    spdlog::warn("request {} failed: {}", id, error->what());
    event = error_event(*error);
  } else {
    event.finish_reason = "abort";
    event.finished = true;
  }
  event.prompt_tokens = request.prompt_tokens;
  event.completion_tokens = request.completion_tokens;
  deliver(request.sink, std::move(event));
  close_request(id);
}

void RequestRouter::end_all(const Error& error) {
  std::vector<std::string> ids;
  for (const auto& [id, request] : requests_) ids.push_back(id);
  for (const std::string& id : ids) end_request(id, error);
}

// Forgets a request that has delivered its last event: unconsumed payloads go, edges free up.
void RequestRouter::close_request(const std::string& id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Request& request = it->second;
  // Consumers unlink what they read, so this only removes what nobody will read.
  for (auto& [stage_id, progress] : request.stages) {
    for (const PayloadRef& ref : progress.payloads) discard(ref);
  }
  for (auto& [stage_id, queue] : waiting_) std::erase(queue, id);
  release_edges_into(request, -1);
  requests_.erase(it);
  if (links_.closed) links_.closed(id);
}

ResponseEvent RequestRouter::error_event(const Error& error) {
  ResponseEvent event;
  event.error = error;
  event.finished = true;
  return event;
}

void RequestRouter::deliver(const EventSink& sink, ResponseEvent event) {
  try {
    if (sink) sink(std::move(event));
  } catch (const std::exception& e) {
    spdlog::error("an event sink threw: {}", e.what());
  }
}

}  // namespace omni::runtime
