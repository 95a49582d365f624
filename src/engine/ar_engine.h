// ArEngine — the autoregressive stage engine (the role of vLLM's EngineCore): continuous batching
// over a paged KV cache with prefix caching, chunked prefill, preemption by recompute, and sampling.
//
// Each step() is one scheduler iteration: admit and pick the batch (Scheduler), run the model once
// on it, sample one token for every sequence whose prompt or decode step completed, check stops, and
// return the deltas. Requests move waiting -> running -> finished (stop, length, abort), and
// running -> preempted -> running when the KV cache runs short.
//
// With async_scheduling (vLLM's), a step launches the model on its batch and, before reading the
// ids, takes the ids of the step launched before it: so the CPU's scheduling, batch building and
// output processing of one step overlap the device's work on the next. A step is scheduled while
// its predecessor's tokens are still on the device: each of those sequences is given one
// placeholder token, whose input the model reads from the predecessor's ids where they are
// (CausalLm::launch_step); a sequence that the predecessor's token ends has its token from this
// step discarded. The first step returns no outputs, and outputs arrive one step later. Outputs
// are exactly the synchronous engine's. A request that needs its history or its logits on the
// host before the next step (logprobs, logit_bias, penalties, min_tokens over stop tokens) makes
// the engine run synchronously while it is unfinished.
//
// A model that is a model::EmbeddingInputLm (model/embedding_input_lm.h) builds its own input rows: its
// requests start through the model (additional_information), their prompts are the model's rows,
// fed whole (no chunked prefill, no prefix cache), every step samples on the host after the
// request's suppressed token ranges and then hands the tokens to the model's finish_step, whose
// per-row bytes come out as the completion's step_outputs. Such an engine runs synchronously (no
// async scheduling) and a request has one completion. A model that cannot recompute KV has each
// request's whole prompt + max_tokens reserved at admission and is never preempted.
//
// A request may also stream in (an embedding-input model reading an upstream stage that still
// generates: add_input); it is queued once the model can build its prompt, and while running it
// is passed over whenever its next row waits for input. A text LM whose model gives rows to a
// downstream stage (CausalLm::downstream_layer) captures them for each request that feeds one
// (EngineRequest::feeds_downstream): such steps run synchronously, off the prefix cache, and each
// sampled token carries the payload of the rows computed since the previous one.
//
// Threads: an ArEngine is owned by one thread, which makes every call (a stage worker's loop). The
// exception is check_request(), which reads only immutable state and may be called from any thread.
// Ownership: the engine borrows the model and the detokenizer; both must outlive it. It sizes and
// initialises the model's KV cache in its constructor.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/json.h"
#include "engine/detokenizer.h"
#include "engine/engine_config.h"
#include "engine/kv_cache_manager.h"
#include "engine/request_output.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/scheduler.h"
#include "model/causal_lm.h"
#include "model/embedding_input_lm.h"

namespace omni::engine {

struct EngineRequest {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;  // ignored by an embedding-input model, which builds its prompt
  SamplingParams sampling_params;
  // What an embedding-input model starts the request from (model::ArRequestInput): its fields,
  // the upstream stage's payloads so far (read during add_request only) and whether more follow
  // through add_input.
  Json additional_information;
  std::vector<std::span<const uint8_t>> inputs;
  bool input_open = false;
  // A downstream stage reads this request's rows (the model's CausalLm::downstream_layer): each
  // sampled token's step output is the payload of the rows computed since the previous one.
  bool feeds_downstream = false;
};

struct EngineStats {
  int num_blocks = 0;
  int num_free_blocks = 0;  // free or evictable
  int num_running = 0;      // sequences
  int num_waiting = 0;      // sequences, preempted ones included
  uint64_t num_preemptions = 0;
  uint64_t num_steps = 0;
  // The batch of the latest step: sequences and tokens fed to the model (equal for a pure decode).
  int last_step_num_seqs = 0;
  int last_step_num_tokens = 0;
  PrefixCacheStats prefix_cache;
};

class ArEngine {
 public:
  // Resolves `config` against the model (see EngineConfig), then sizes and initialises the KV cache.
  // Throws omni::Error(kInvalidConfig) for settings that cannot work, naming them.
  ArEngine(model::CausalLm& model, const EngineConfig& config, const Detokenizer* detokenizer = nullptr);
  ~ArEngine();
  ArEngine(const ArEngine&) = delete;
  ArEngine& operator=(const ArEngine&) = delete;

  const ResolvedEngineConfig& config() const { return config_; }
  const model::CausalLmInfo& model_info() const { return info_; }

  // Checks a request as add_request would (except for a duplicate id) and returns its validated
  // sampling parameters. Throws omni::Error(kInvalidArgument) naming the parameter or token at fault.
  // Any thread. For an embedding-input model only the sampling parameters (start_request checks the rest).
  SamplingParams check_request(const EngineRequest& request) const;
  // Queues a request (FCFS). Throws as check_request, and for an id already in the engine.
  // A request whose additional_information carries media (model/causal_lm.h's kMultiModalData) has
  // its prompt expanded by the model, which encodes the media here (kInvalidArgument naming the
  // media at fault); such a prompt's blocks are never prefix-cached.
  void add_request(EngineRequest request);
  // The next payloads of a request added with input_open (an embedding-input model's streamed
  // input), `last` when its upstream stage finished. Throws omni::Error(kInvalidArgument) for an
  // unknown id, a request whose input ended, or input the model refuses (the request stays; the
  // caller aborts it).
  void add_input(std::string_view request_id, std::span<const std::span<const uint8_t>> payloads, bool last);
  // Ends an unfinished request now, freeing its KV blocks, and returns its last output (finish
  // reason abort, carrying `error` if given). nullopt when the id is unknown or already finished.
  std::optional<RequestOutput> abort(std::string_view request_id, std::optional<Error> error = std::nullopt);
  // Aborts every unfinished request (engine shutdown or failure).
  std::vector<RequestOutput> abort_all(const std::optional<Error>& error = std::nullopt);
  // One iteration; returns one output per request that advanced, finished or failed, in batch order.
  // An exception from the model propagates; the engine is then only good for abort_all().
  std::vector<RequestOutput> step();
  // Also true while a launched step's ids are still to be read (async scheduling).
  bool has_unfinished_requests() const { return !requests_.empty() || in_flight_; }
  // Requests added and not finished (those waiting for streamed input included).
  size_t num_unfinished_requests() const { return requests_.size(); }
  // Whether step() can make progress now: false while every unfinished request waits for streamed
  // input (and no step is in flight).
  bool can_step() const;
  EngineStats stats() const;

  // Sleep mode (level 1): with no unfinished request, frees the model's KV storage (its weights
  // stay where they are) and forgets the prefix cache; wake_up() allocates the storage again (and
  // re-records the decode steps of a model on a GPU). While asleep add_request() and step() throw
  // omni::Error(kUnavailable). sleep() throws kUnavailable while requests are unfinished; both are
  // no-ops in the state they lead to.
  void sleep();
  void wake_up();
  bool asleep() const { return asleep_; }

 private:
  struct Request;
  struct Completion;

  // How a step's tokens are picked: kArgmax when every row takes the plain argmax of its raw logits
  // (CausalLm::forward_greedy); kDevice when every row's processing is ops::sample's (penalties,
  // temperature, top-k/top-p/min-p, the Philox draw: CausalLm::forward_sample, on the model's
  // device); kHost when some row needs what only the host Sampler does (logprobs, logit_bias, an
  // active min_tokens mask), which then samples the whole step from forward()'s rows. Both
  // samplers draw from each sequence's SamplingRng the same way, so a stream continues unchanged
  // when its steps change path.
  enum class SamplingPath { kArgmax, kDevice, kHost };
  SamplingPath sampling_path() const;
  // Runs the model on batch_ (completing `plan` in the scheduler) and fills sampled_ with one token
  // per row of sampling_, by sampling_path().
  void forward_and_sample(const SchedulerOutput& plan);
  bool needs_host_sampler(const Completion& completion) const;
  // Whether min_tokens masks the completion's stop tokens at its next token.
  bool min_tokens_masks(const Completion& completion) const;
  // Whether the completion's next token is the argmax of its raw logits (greedy, and nothing that
  // edits the row first: logprobs, logit_bias, penalties, an active min_tokens mask).
  bool picks_plain_argmax(const Completion& completion) const;
  // Streamed input: marks which running sequences await input and queues the requests whose
  // prompt became ready.
  void update_awaiting_input();
  // The rows the step computed of each request that feeds a downstream stage, kept until its next
  // sampled token takes them.
  void keep_downstream_rows(const SchedulerOutput& plan);
  // Appends sampled_[row] to sampling_[row] for every row and returns the step's outputs.
  std::vector<RequestOutput> finish_step();
  // An embedding-input model's step: forward_step, the host sampler after each row's suppressed ranges, then
  // its finish_step, whose outputs go to step_outputs_ (by row).
  void forward_embedding_lm(const SchedulerOutput& plan);
  // Samples every row of sampling_ from logits_ with the host Sampler, in parallel.
  void sample_on_host();
  // Starts an embedding-input model's request: the model plans it (its state, suppressed ranges and
  // overrides of `params` go into `r`) and this returns its prompt rows.
  int start_embedding_request(const EngineRequest& request, SamplingParams& params, Request& r);
  // Adds to batch_ the media rows of a prompt with media that fall in the scheduled slice.
  void add_media_rows(const model::MultimodalPrompt& media, const ScheduledSequence& s,
                      const model::SequenceSlice& slice);
  // Appends the three M-RoPE streams of the scheduled tokens of `s` to mrope_streams_: a media
  // prompt's own streams, position + rope delta past its prompt, the plain position otherwise.
  void add_mrope_positions(const ScheduledSequence& s);
  // Async scheduling: launches the model on batch_ (its placeholder tokens read from the step in
  // flight) and returns the outputs of the step in flight, leaving this one in flight.
  std::vector<RequestOutput> launch_and_overlap(const SchedulerOutput& plan, bool reads_previous_step);
  // Reads the ids of the step in flight, appends them to their (still unfinished) completions and
  // returns their outputs.
  std::vector<RequestOutput> finish_in_flight();
  // Whether the request's next token needs its full history or its logits on the host.
  static bool needs_host_history(const Request& request);
  void append_token(Completion& completion, const SampledToken& sampled);
  void finish(Completion& completion, FinishReason reason);
  CompletionOutput take_delta(Completion& completion);
  RequestOutput take_output(Request& request);
  void forget(Request& request);

  model::CausalLm& model_;
  model::EmbeddingInputLm* embedding_lm_;  // model_ when it is one, else nullptr
  model::CausalLmInfo info_;
  const Detokenizer* detokenizer_;
  ResolvedEngineConfig config_;
  KvCacheManager kv_;
  Scheduler scheduler_;
  std::vector<Sampler> samplers_;  // one per part of a step's rows sampled in parallel
  std::vector<Completion*> sampling_;
  std::vector<SampledToken> sampled_;
  SamplingRng seed_source_;
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
  std::unordered_map<const Sequence*, Completion*> completions_;
  int64_t next_sequence_id_ = 0;
  uint64_t num_steps_ = 0;
  int last_step_num_seqs_ = 0;
  int last_step_num_tokens_ = 0;
  model::ForwardBatch batch_;
  std::array<std::vector<float>, 3> mrope_streams_;  // the batch's M-RoPE streams as add_mrope_positions fills them
  std::vector<float> logits_;
  std::vector<int32_t> sampled_ids_;
  std::vector<tensor::ops::SamplingParams> device_params_;
  // An embedding-input model's step: the request state of each slice, the sampled rows and their outputs.
  std::vector<model::ArRequestState*> step_states_;
  std::vector<model::ArSampledRow> sampled_rows_;
  std::vector<std::vector<uint8_t>> step_outputs_;
  // Async scheduling: the rows of the step in flight, and of the step being launched, with nullptr
  // for a completion forgotten since (aborted); the unfinished requests that keep the engine
  // synchronous (needs_host_history).
  bool in_flight_ = false;
  bool asleep_ = false;
  std::vector<Completion*> in_flight_rows_;
  std::vector<Completion*> launched_rows_;
  std::vector<int32_t> previous_rows_;
  int num_synchronous_requests_ = 0;
  // Requests that feed a downstream stage (their steps run synchronously, with a capture).
  int num_downstream_requests_ = 0;
  model::ForwardBatch::HiddenCapture capture_;
};

}  // namespace omni::engine
