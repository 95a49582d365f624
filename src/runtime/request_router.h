// The routing of requests through a pipeline's stages (full-payload and async_chunk), with the
// per-edge back-pressure, for the orchestrator:
//
// A request enters its plan's entry stage. When a stage finishes a request, each stage on the
// request's route that lists it in input_sources gets the request once all its sources finished,
// with the first source's generated tokens as its prompt and every source's payloads (through the
// edge's connector) as inputs. An async_chunk stage instead starts on its source's first output
// (tokens and payloads) and receives each later output as an InputChunk while the source still
// generates; outputs that arrive while it cannot start yet wait in the head, in order. At most
// `edge_inflight_limit` requests are in flight across an edge (submitted to the consumer and not
// finished there); more wait in the head in arrival order, holding only payload references. The
// outputs of the plan's output stages go to the request's EventSink, each event naming its output
// (ResponseEvent::modality, stage_id); a request ends once every output stage finished (its last
// event has `finished`), on an error from any stage, on abort, or when a stage it needs has no
// ready replica.
//
// Ownership and threads: one thread (the orchestrator's) uses an object. The router owns every
// live request's routing state and the head's connector of each edge (to discard payloads nobody
// will read); it borrows the ReplicaSet, which picks replicas and records which requests each
// holds. Sinks are called from that thread, one request's events in order.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/metrics.h"
#include "runtime/connector.h"
#include "runtime/replica_set.h"
#include "runtime/request_plan.h"
#include "runtime/serving_backend.h"

namespace omni::runtime {

// What a RequestRouter needs from its owner.
struct RouterLinks {
  // Queues a message for a replica; false when its control connection is gone.
  std::function<bool(const Replica& replica, const StageMessage& message)> send;
  // A send to `replica` failed: the owner fails the replica, ending its requests through
  // end_request().
  std::function<void(Replica& replica, const std::string& reason)> replica_failed;
  // A request delivered its last event and is forgotten (its id may be used again).
  std::function<void(const std::string& request_id)> closed;
};

// A RequestRouter's series; null histograms are not observed.
struct RouterMetrics {
  Histogram* dispatch_time = nullptr;  // start() called to the entry stage's Submit sent
  std::vector<Histogram*> hop_time;    // by stage id (see OrchestratorOptions::metrics); or empty
};

class RequestRouter {
 public:
  using Clock = std::chrono::steady_clock;

  // Builds the connector of every edge. Throws omni::Error(kInvalidConfig) for a bad connector or
  // an edge_inflight_limit below 1. `pipeline` and `replicas` must outlive the router.
  RequestRouter(const PipelineSpec& pipeline, ReplicaSet& replicas, const ConnectorContext& context,
                int edge_inflight_limit, RouterLinks links, RouterMetrics metrics = {});

  // Sends a new request (its id not live) to a replica of its plan's entry stage. `queued` is when
  // it was submitted, for the dispatch time.
  void start(GenerationRequest request, EventSink sink, RequestPlan plan, Clock::time_point queued);
  // A replica's output for a request. Outputs of requests that ended meanwhile, or from a replica
  // the request is not on, only have their payloads discarded.
  void on_output(Replica& replica, OutputMessage& output);
  // A replica's error for one request (not a fatal one): the request ends with it, the message
  // prefixed with "stage N: " unless it says so already.
  void on_error(Replica& replica, const ErrorMessage& error);
  // Ends a live request early: with `error`, or as aborted by the client when there is none. The
  // replicas still working on it get an Abort. Unknown ids are ignored.
  void end_request(const std::string& id, std::optional<Error> error);
  // Ends every live request with `error` (shutdown).
  void end_all(const Error& error);

  // A pool of a distributed launch: the router keeps what it sent to each stage (the Submit and
  // the InputChunks) until the stage finishes the request, and holds a non-streaming request's
  // client events until it finished, so that a request can be replayed (replica_lost()).
  void enable_replay() { replay_ = true; }
  // `replica` failed (`failure` says how) holding `ids`. Each whose client has received nothing
  // yet, and whose output at that stage went nowhere but to the client (an output stage that feeds
  // no stage, or a stage that produced nothing yet), is sent again — the same
  // Submit and InputChunks — to another ready replica of the stage; the others end with an error
  // naming the stage and replica (kUnavailable), as do all of them when replay is off or the stage
  // has no ready replica left.
  void replica_lost(const Replica& replica, const std::set<std::string>& ids, const std::string& failure);

  // For tests and introspection.
  bool live(const std::string& id) const { return requests_.count(id) > 0; }
  size_t live_requests() const { return requests_.size(); }
  int in_flight(int from_stage, int to_stage) const { return edges_.at({from_stage, to_stage}).in_flight; }
  size_t waiting(int stage_id) const;

  // Calls `sink` with `event`; an exception from the sink is logged, never passed on.
  static void deliver(const EventSink& sink, ResponseEvent event);
  static ResponseEvent error_event(const Error& error);

 private:
  using Edge = std::pair<int, int>;  // (from stage, to stage)

  struct StageProgress {
    int replica = -1;
    bool finished = false;
    Clock::time_point submitted;
    std::vector<int32_t> tokens;
    std::vector<PayloadRef> payloads;  // produced here for consumers on the route
    // With replay: what the head sent this stage for the request, until the stage finished it.
    std::optional<SubmitMessage> submit;
    std::vector<InputChunkMessage> chunks;
  };

  struct Request {
    std::string id;
    EventSink sink;
    RequestPlan plan;
    int prompt_tokens = 0;
    std::vector<int32_t> prompt;
    Json additional_information;
    std::map<int, StageProgress> stages;  // stages submitted to so far
    std::vector<Edge> held_edges;         // edges whose in-flight count includes this request
    // async_chunk outputs for a consumer that has not started yet (its edge is full).
    std::map<int, std::deque<InputChunkMessage>> buffered_chunks;
    int completion_tokens = 0;        // generated by the plan's primary stage
    bool stream = true;               // GenerationRequest::stream
    bool delivered = false;           // the sink has had an event
    std::vector<ResponseEvent> held;  // with replay, a non-streaming request's events until it finished
  };

  struct EdgeState {
    int in_flight = 0;
  };

  void discard(const PayloadRef& ref);
  void stream_chunk(const std::string& id, int stage_id, InputChunkMessage chunk);
  void start_streaming(Request& request, int stage_id);
  bool sources_finished(const Request& request, int stage_id) const;
  bool edges_have_room(int stage_id) const;
  void forward(const std::string& id, int stage_id);
  void release_edges_into(Request& request, int stage_id);
  // Whether every output stage of the request other than `stage_id` has finished.
  bool outputs_finished_but(const Request& request, int stage_id) const;
  // Sends an Abort to every stage still working on the request and frees its replicas.
  void abort_unfinished_stages(Request& request);
  void pump_waiting(int stage_id);
  void submit_to_stage(Request& request, int stage_id, std::vector<int32_t> prompt, std::vector<PayloadRef> inputs,
                       bool input_open = false);
  // By value: callers pass the request's own id (request.id), which the request's erasure frees.
  void close_request(std::string id);
  void deliver_to_client(Request& request, ResponseEvent event);
  bool send_to(Replica& replica, StageMessage message);
  std::vector<PayloadRef> for_replica(const Replica& replica, std::vector<PayloadRef> refs);

  const PipelineSpec& pipeline_;
  ReplicaSet& replicas_;
  const int edge_inflight_limit_;
  const RouterLinks links_;
  const RouterMetrics metrics_;
  std::map<Edge, std::unique_ptr<Connector>> edge_connectors_;
  std::map<std::string, Request> requests_;
  std::map<Edge, EdgeState> edges_;
  std::map<int, std::deque<std::string>> waiting_;
  bool replay_ = false;
};

}  // namespace omni::runtime
