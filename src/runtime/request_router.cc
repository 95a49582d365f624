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
  request.stream = generation.stream;
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
  // The entry stage's model may have expanded the prompt (media placeholders): usage counts that.
  if (replica.stage_id == request.plan.stages.front() && output.prompt_tokens > 0) {
    request.prompt_tokens = output.prompt_tokens;
  }
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
  if (replica.stage_id == request.plan.primary_stage) {
    request.completion_tokens += static_cast<int>(output.token_ids.size());
  }
  const bool last_output = finished && outputs_finished_but(request, replica.stage_id);
  if (request.plan.delivers(replica.stage_id)) {
    ResponseEvent event;
    event.modality = pipeline_.stages[replica.stage_id].final_output_type;
    event.stage_id = replica.stage_id;
    event.index = output.index;
    event.token_ids = std::move(output.token_ids);
    event.text = std::move(output.text);
    event.logprobs = std::move(output.logprobs);
    event.audio = std::move(output.audio);
    event.audio_sample_rate = output.audio_sample_rate;
    event.image = std::move(output.image);
    event.finish_reason = output.finish_reason;
    event.output_finished = finished;
    event.finished = last_output;
    event.prompt_tokens = request.prompt_tokens;
    event.completion_tokens = request.completion_tokens;
    deliver_to_client(request, std::move(event));
  }
  if (finished) {
    progress->finished = true;
    progress->submit.reset();
    progress->chunks.clear();
    // What the sources produced for this stage was kept for a replay; nobody reads it now.
    for (int source : pipeline_.stages[replica.stage_id].input_sources) {
      auto produced = request.stages.find(source);
      if (produced == request.stages.end()) continue;
      for (const PayloadRef& ref : produced->second.payloads) {
        if (ref.address.to_stage == replica.stage_id) discard(ref);
      }
    }
    replicas_.release(replica, id);
    release_edges_into(request, replica.stage_id);
    if (last_output) {
      abort_unfinished_stages(request);  // none on the routes we have: every stage feeds an output
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
    StageProgress& progress = started->second;
    if (progress.finished) return;
    Replica& replica = replicas_.at(stage_id, progress.replica);
    if (replay_) progress.chunks.push_back(chunk);
    chunk.payloads = for_replica(replica, std::move(chunk.payloads));
    send_to(replica, std::move(chunk));
    return;
  }
  auto& buffered = request.buffered_chunks[stage_id];
  buffered.push_back(std::move(chunk));
  if (buffered.size() == 1) {
    forward(id, stage_id);  // may start it (and drop `buffered`) or queue it behind a full edge
    return;
  }
  spdlog::debug("request {}: {} chunks for stage {} wait for it to start", id, buffered.size(), stage_id);
}

// Starts an async_chunk consumer with the chunks that reached the head before it could start.
void RequestRouter::start_streaming(Request& request, int stage_id) {
  std::deque<InputChunkMessage> chunks = std::move(request.buffered_chunks[stage_id]);
  request.buffered_chunks.erase(stage_id);
  InputChunkMessage& first = chunks.front();
  const std::string id = request.id;
  spdlog::debug("request {}: stage {} starts streaming with {} chunks", id, stage_id, chunks.size());
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
  replica.requests_taken++;
  SubmitMessage message{request.id,
                        std::move(prompt),
                        request.plan.sampling_params.at(stage_id),
                        std::move(inputs),
                        request.plan.consumers.at(stage_id),
                        input_open,
                        request.additional_information};
  if (replay_) progress.submit = message;
  message.inputs = for_replica(replica, std::move(message.inputs));
  send_to(replica, std::move(message));
}

bool RequestRouter::send_to(Replica& replica, StageMessage message) {
  if (links_.send(replica, message)) return true;
  links_.replica_failed(replica, "its control connection is gone");
  return false;
}

// Shared memory does not reach a replica on another host: what the head can read of it travels
// inline (the producer was on the head's host; a producer elsewhere sent its payloads inline).
std::vector<PayloadRef> RequestRouter::for_replica(const Replica& replica, std::vector<PayloadRef> refs) {
  if (!replica.other_host) return refs;
  for (PayloadRef& ref : refs) {
    if (ref.is_inline()) continue;
    auto connector = edge_connectors_.find({ref.address.from_stage, ref.address.to_stage});
    if (connector == edge_connectors_.end()) continue;
    try {
      PayloadView view = connector->second->get(ref);
      ref.inline_bytes.assign(view.bytes().begin(), view.bytes().end());
      ref.location.clear();
    } catch (const Error& e) {
      spdlog::warn("payload {} for stage {} replica {}: {}", ref.address.key(), replica.stage_id, replica.index,
                   e.what());
    }
  }
  return refs;
}

void RequestRouter::deliver_to_client(Request& request, ResponseEvent event) {
  if (replay_ && !request.stream && !event.finished) {
    request.held.push_back(std::move(event));
    return;
  }
  for (ResponseEvent& held : request.held) deliver(request.sink, std::move(held));
  request.held.clear();
  request.delivered = true;
  deliver(request.sink, std::move(event));
}

void RequestRouter::replica_lost(const Replica& lost, const std::set<std::string>& ids, const std::string& failure) {
  for (const std::string& id : ids) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    Request& request = it->second;
    auto stage = request.stages.find(lost.stage_id);
    if (stage == request.stages.end() || stage->second.replica != lost.index || stage->second.finished) continue;
    StageProgress& progress = stage->second;
    const bool only_to_client =
        request.plan.delivers(lost.stage_id) && request.plan.consumers.at(lost.stage_id).empty();
    if (!replay_ || request.delivered || !progress.submit ||
        (!only_to_client && (!progress.tokens.empty() || !progress.payloads.empty()))) {
      std::string why = !replay_ || !progress.submit ? ""
                        : request.delivered          ? " while its output was streaming to the client"
                                                     : " after its output had gone on to the next stage";
      end_request(id, Error(ErrorCode::kUnavailable, failure + why));
      continue;
    }
    const int index = replicas_.pick(lost.stage_id);
    if (index < 0) {
      end_request(id, Error(ErrorCode::kUnavailable, fmt::format("{}; stage {} has no healthy replica to replay it on",
                                                                 failure, lost.stage_id)));
      continue;
    }
    Replica& next = replicas_.at(lost.stage_id, index);
    spdlog::warn("request {}: {}; replayed on stage {} replica {}", id, failure, lost.stage_id, index);
    std::erase_if(request.held, [&](const ResponseEvent& held) { return held.stage_id == lost.stage_id; });
    if (lost.stage_id == request.plan.primary_stage) request.completion_tokens = 0;
    progress.tokens.clear();
    progress.replica = index;
    progress.submitted = Clock::now();
    replicas_.assign(next, id);
    next.requests_taken++;
    SubmitMessage submit = *progress.submit;
    submit.inputs = for_replica(next, std::move(submit.inputs));
    if (!send_to(next, std::move(submit))) continue;
    for (const InputChunkMessage& sent : progress.chunks) {
      InputChunkMessage chunk = sent;
      chunk.payloads = for_replica(next, std::move(chunk.payloads));
      if (!send_to(next, std::move(chunk))) break;
    }
  }
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
  abort_unfinished_stages(request);
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
  request.held.clear();  // an error or abort replaces what a non-streaming client would have read
  deliver(request.sink, std::move(event));
  close_request(id);
}

bool RequestRouter::outputs_finished_but(const Request& request, int stage_id) const {
  for (int output : request.plan.output_stages) {
    if (output == stage_id) continue;
    auto it = request.stages.find(output);
    if (it == request.stages.end() || !it->second.finished) return false;
  }
  return true;
}

void RequestRouter::abort_unfinished_stages(Request& request) {
  for (auto& [stage_id, progress] : request.stages) {
    if (progress.finished) continue;
    progress.finished = true;
    Replica& replica = replicas_.at(stage_id, progress.replica);
    replicas_.release(replica, request.id);
    if (replica.phase == ReplicaPhase::kReady) links_.send(replica, AbortMessage{request.id});
  }
}

void RequestRouter::end_all(const Error& error) {
  std::vector<std::string> ids;
  for (const auto& [id, request] : requests_) ids.push_back(id);
  for (const std::string& id : ids) end_request(id, error);
}

// Forgets a request that has delivered its last event: unconsumed payloads go, edges free up.
void RequestRouter::close_request(std::string id) {
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
