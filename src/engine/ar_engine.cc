#include "engine/ar_engine.h"

#include <algorithm>
#include <cassert>
#include <limits>

#include "base/error.h"
#include "base/log.h"
#include "engine/decode_batch_sizes.h"
#include "engine/kv_cache_sizing.h"
#include "engine/stop_strings.h"
#include "tensor/cpu/thread_pool.h"
#include "tensor/device.h"

namespace omni::engine {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
  }
  return "unknown";
}

// One of a request's n completions: its sequence plus what the client has been sent of it.
struct ArEngine::Completion {
  Completion(Request& r, int i, uint64_t seed) : request(r), index(i), rng(seed) {}

  Request& request;
  int index;
  Sequence seq;
  SamplingRng rng;
  std::unique_ptr<DetokenizerStream> detokenizer;
  std::string text;
  size_t text_sent = 0;
  int tokens_sent = 0;  // output tokens already reported
  std::vector<SampledToken> unsent_logprobs;
  std::optional<FinishReason> finish_reason;
  StopReason stop_reason;
  bool finish_sent = false;
  // Async scheduling: the row of the step in flight that holds this completion's next token.
  int in_flight_row = -1;
  // An embedding-input model's step outputs not yet reported, one per unsent output token (for a
  // request that feeds a downstream stage: the payloads of its rows).
  std::vector<std::vector<uint8_t>> unsent_step_outputs;
  // A request that feeds a downstream stage: the rows computed since its last sampled token, from
  // position downstream_first on, and the first position not captured yet (a recompute after a
  // preemption computes earlier rows again; they went out already).
  int downstream_first = 0;
  int downstream_until = 0;
  std::vector<int32_t> downstream_ids;
  std::vector<float> downstream_embeddings;
  std::vector<float> downstream_hidden;
};

struct ArEngine::Request {
  std::string id;
  SamplingParams params;
  int max_tokens = 0;
  // What min_tokens masks: EOS (unless ignore_eos) and stop_token_ids (vLLM's all_stop_token_ids).
  std::vector<int32_t> min_tokens_stop_ids;
  size_t text_holdback = 0;
  std::vector<std::unique_ptr<Completion>> completions;
  int num_unfinished = 0;
  bool in_step_output = false;
  // An embedding-input model's request: its state, the ranges it never samples, whether it holds the model's
  // per-request resources (from admission on).
  std::unique_ptr<model::ArRequestState> state;
  std::vector<model::TokenRange> suppressed_tokens;
  bool acquired = false;
  // Streamed input: more follows (add_input); the request's sequence is in the scheduler (queued
  // once the model can build its prompt).
  bool input_open = false;
  bool queued = false;
  bool feeds_downstream = false;
  // A prompt with media: the rows that replace its placeholders' embeddings (fed again when a
  // preempted sequence recomputes its prompt).
  std::optional<model::MultimodalPrompt> media;
};

namespace {

ResolvedEngineConfig resolve(model::CausalLm& model, bool builds_inputs, const EngineConfig& config) {
  const model::CausalLmInfo& info = model.info();
  if (info.vocab_size <= 0) throw_error(ErrorCode::kInternal, "the model reports a vocabulary of {}", info.vocab_size);
  if (config.max_num_seqs < 1) {
    throw_error(ErrorCode::kInvalidConfig, "max_num_seqs must be at least 1, got {}", config.max_num_seqs);
  }
  if (config.max_num_batched_tokens < 0) {
    throw_error(ErrorCode::kInvalidConfig, "max_num_batched_tokens must be positive, got {}",
                config.max_num_batched_tokens);
  }
  ResolvedEngineConfig r;
  r.max_num_seqs = config.max_num_seqs;
  // An embedding-input model's prompts are its rows, fed whole, and it runs synchronously.
  r.enable_chunked_prefill = config.enable_chunked_prefill && !builds_inputs;
  r.enable_prefix_caching = config.enable_prefix_caching;
  r.async_scheduling = config.async_scheduling && !builds_inputs;
  constexpr int kChunkedPrefillTokens = 2048;
  size_t budget = 0;
  if (!config.kv_cache_memory_bytes && config.num_gpu_blocks_override <= 0) {
    if (config.memory_at_start && model.device().type == tensor::DeviceType::kCuda) {
      const tensor::DeviceMemory now = tensor::cuda_memory_info(model.device().index);
      budget = gpu_share_kv_cache_bytes(*config.memory_at_start, now, config.gpu_memory_utilization,
                                        model.activation_bytes(config.max_num_batched_tokens, config.max_num_seqs));
      spdlog::info("engine: {} MiB of {}'s {} MiB in use; this stage's share {} leaves {} MiB of KV cache",
                   (now.total_bytes - now.free_bytes) >> 20, tensor::device_name(model.device()), now.total_bytes >> 20,
                   config.gpu_memory_utilization, budget >> 20);
    } else if (model.device().type == tensor::DeviceType::kCuda) {
      // The largest step: the token budget as resolved below (max_model_len is not known yet
      // without chunked prefill, so the longest sequence the model or the config allows).
      const int longest = config.max_model_len > 0 ? config.max_model_len : info.max_position_embeddings;
      const int step_tokens = config.max_num_batched_tokens > 0 ? config.max_num_batched_tokens
                              : config.enable_chunked_prefill   ? kChunkedPrefillTokens
                                                                : std::max(longest, kChunkedPrefillTokens);
      budget = default_gpu_kv_cache_bytes(model, config.gpu_memory_utilization, step_tokens, config.max_num_seqs);
      // CUDA graphs keep their own activations (the graph pool, tensor/device_graph.h), as large as
      // the largest padded decode step's.
      const std::vector<int> sizes = decode_batch_sizes(config.max_num_seqs);
      if (!config.enforce_eager && !sizes.empty()) {
        const size_t graphs = model.activation_bytes(sizes.back(), sizes.back());
        budget = budget > graphs ? budget - graphs : 0;
      }
    } else {
      budget = default_cpu_kv_cache_bytes();
    }
  }
  size_kv_cache(config, model.kv_bytes_per_block(), info.max_position_embeddings, budget, r);

  r.max_num_batched_tokens = config.max_num_batched_tokens > 0 ? config.max_num_batched_tokens
                             : r.enable_chunked_prefill        ? kChunkedPrefillTokens
                                                               : std::max(r.max_model_len, kChunkedPrefillTokens);
  // A model that builds its prompts feeds each whole in one step: unless max_model_len was set, a
  // step's tokens bound it.
  if (builds_inputs && config.max_model_len <= 0 && r.max_num_batched_tokens < r.max_model_len) {
    spdlog::info("engine: max_model_len lowered from {} to max_num_batched_tokens ({}): prompts are fed whole",
                 r.max_model_len, r.max_num_batched_tokens);
    r.max_model_len = r.max_num_batched_tokens;
  }
  if (!r.enable_chunked_prefill && r.max_num_batched_tokens < r.max_model_len) {
    throw_error(ErrorCode::kInvalidConfig,
                "max_num_batched_tokens ({}) is smaller than max_model_len ({}) with chunked prefill disabled, so "
                "long prompts could never run; raise max_num_batched_tokens, lower max_model_len or enable chunked "
                "prefill",
                r.max_num_batched_tokens, r.max_model_len);
  }
  if (r.max_num_batched_tokens < r.max_num_seqs) {
    throw_error(ErrorCode::kInvalidConfig, "max_num_batched_tokens ({}) must be at least max_num_seqs ({})",
                r.max_num_batched_tokens, r.max_num_seqs);
  }
  return r;
}

}  // namespace

ArEngine::ArEngine(model::CausalLm& model, const EngineConfig& config, const Detokenizer* detokenizer)
    : model_(model),
      embedding_lm_(dynamic_cast<model::EmbeddingInputLm*>(&model)),
      info_(model.info()),
      detokenizer_(detokenizer),
      config_(resolve(model, embedding_lm_ != nullptr, config)),
      kv_(config_.num_blocks, config_.enable_prefix_caching),
      scheduler_(SchedulerConfig{config_.max_num_seqs, config_.max_num_batched_tokens, config_.enable_chunked_prefill},
                 kv_),
      seed_source_(config.seed) {
  model_.init_kv_cache(config_.num_blocks);
  if (embedding_lm_) {
    embedding_lm_->prepare_requests(config_.max_num_seqs, decode_batch_sizes(config_.max_num_seqs),
                                    !config.enforce_eager);
  }
  if (model_.device().type == tensor::DeviceType::kCuda) {
    const std::vector<int> sizes = decode_batch_sizes(config_.max_num_seqs);
    const int max_blocks = (config_.max_model_len + model::kKvBlockSize - 1) / model::kKvBlockSize;
    if (model_.prepare_decode_steps(sizes, max_blocks, !config.enforce_eager)) {
      config_.decode_batch_sizes = sizes;
      config_.cuda_graphs = !config.enforce_eager;
      spdlog::info("engine: decode steps padded to {} batch sizes up to {}, {}", sizes.size(), sizes.back(),
                   config_.cuda_graphs ? "one CUDA graph each" : "eager (enforce_eager)");
    }
  }
  spdlog::info(
      "engine: {} KV blocks of {} tokens ({} bytes each), max_model_len {}, max_num_seqs {}, "
      "max_num_batched_tokens {}, chunked prefill {}, prefix caching {}",
      config_.num_blocks, model::kKvBlockSize, config_.kv_bytes_per_block, config_.max_model_len, config_.max_num_seqs,
      config_.max_num_batched_tokens, config_.enable_chunked_prefill ? "on" : "off",
      config_.enable_prefix_caching ? "on" : "off");
  if (config_.async_scheduling) spdlog::info("engine: async scheduling (the next step is scheduled during this one)");
}

ArEngine::~ArEngine() = default;

SamplingParams ArEngine::check_request(const EngineRequest& request) const {
  const auto& prompt = request.prompt_token_ids;
  if (prompt.empty() && !embedding_lm_) {
    throw_error(ErrorCode::kInvalidArgument, "request {}: the prompt is empty", request.request_id);
  }
  for (size_t i = 0; i < prompt.size() && !embedding_lm_; ++i) {
    if (prompt[i] < 0 || prompt[i] >= info_.vocab_size) {
      throw_error(ErrorCode::kInvalidArgument,
                  "request {}: prompt token {} (at index {}) is outside the vocabulary of {} tokens",
                  request.request_id, prompt[i], i, info_.vocab_size);
    }
  }
  if (!embedding_lm_ && static_cast<int>(prompt.size()) > config_.max_model_len) {
    throw_error(ErrorCode::kInvalidArgument, "request {}: the prompt ({} tokens) is longer than max_model_len ({})",
                request.request_id, prompt.size(), config_.max_model_len);
  }
  SamplingParams params = validated(request.sampling_params);
  for (const auto& [token, bias] : params.logit_bias) {
    if (token < 0 || token >= info_.vocab_size) {
      throw_error(ErrorCode::kInvalidArgument,
                  "sampling parameters: logit_bias token {} is outside the vocabulary of {} tokens", token,
                  info_.vocab_size);
    }
  }
  if (!params.stop.empty() && !detokenizer_) {
    throw_error(ErrorCode::kInvalidArgument,
                "sampling parameter 'stop' needs the output text, but this engine has no tokenizer to detokenize "
                "with; use stop_token_ids instead");
  }
  return params;
}

void ArEngine::sleep() {
  if (asleep_) return;
  if (requests_.empty() && in_flight_) finish_in_flight();  // a step of aborted requests: nothing to keep
  if (has_unfinished_requests()) {
    throw_error(ErrorCode::kUnavailable, "the engine cannot sleep with {} unfinished requests", requests_.size());
  }
  model_.init_kv_cache(0);
  kv_.reset();
  asleep_ = true;
}

void ArEngine::wake_up() {
  if (!asleep_) return;
  model_.init_kv_cache(config_.num_blocks);
  if (!config_.decode_batch_sizes.empty()) {
    // The recorded steps read the KV storage where it was; it lives elsewhere now.
    const int max_blocks = (config_.max_model_len + model::kKvBlockSize - 1) / model::kKvBlockSize;
    model_.prepare_decode_steps(config_.decode_batch_sizes, max_blocks, config_.cuda_graphs);
  }
  asleep_ = false;
}

void ArEngine::add_request(EngineRequest request) {
  if (asleep_) throw_error(ErrorCode::kUnavailable, "request {}: the engine is asleep", request.request_id);
  SamplingParams params = check_request(request);
  if (requests_.count(request.request_id)) {
    throw_error(ErrorCode::kInvalidArgument, "request id '{}' is already in the engine", request.request_id);
  }
  auto r = std::make_unique<Request>();
  r->id = request.request_id;
  if (!embedding_lm_) {
    r->media = model_.prepare_multimodal_prompt(request.prompt_token_ids, request.additional_information);
    if (r->media) {
      if (static_cast<int>(r->media->token_ids.size()) > config_.max_model_len) {
        throw_error(ErrorCode::kInvalidArgument,
                    "request {}: the prompt with its media ({} tokens) is longer than max_model_len ({})",
                    request.request_id, r->media->token_ids.size(), config_.max_model_len);
      }
      request.prompt_token_ids = r->media->token_ids;
    }
  }
  const int prompt_len =
      embedding_lm_ ? start_embedding_request(request, params, *r) : static_cast<int>(request.prompt_token_ids.size());
  r->max_tokens = params.max_tokens.value_or(std::max(1, config_.max_model_len - prompt_len));
  if (!params.ignore_eos) r->min_tokens_stop_ids = info_.eos_token_ids;
  r->min_tokens_stop_ids.insert(r->min_tokens_stop_ids.end(), params.stop_token_ids.begin(),
                                params.stop_token_ids.end());
  r->text_holdback = stop_string_holdback(params.stop, params.include_stop_str_in_output);
  r->params = std::move(params);
  if (needs_host_history(*r)) ++num_synchronous_requests_;
  r->feeds_downstream = request.feeds_downstream && !embedding_lm_ && model_.downstream_layer().has_value();
  if (r->feeds_downstream) {
    if (r->params.n != 1) {
      throw_error(ErrorCode::kInvalidArgument,
                  "request {}: sampling parameter 'n' must be 1 when a later stage reads the output, got {}",
                  request.request_id, r->params.n);
    }
    ++num_downstream_requests_;
  }

  for (int i = 0; i < r->params.n; ++i) {
    // vLLM's parallel sampling gives completion i the seed `seed + i`.
    uint64_t seed =
        r->params.seed ? static_cast<uint64_t>(*r->params.seed) + static_cast<uint64_t>(i) : seed_source_.next_u64();
    auto c = std::make_unique<Completion>(*r, i, seed);
    c->seq.id = next_sequence_id_++;
    c->seq.num_prompt_tokens = prompt_len;
    if (embedding_lm_) {
      c->seq.token_ids.assign(static_cast<size_t>(prompt_len), kNoToken);
      c->seq.embedded_prompt = true;
      // A model that cannot recompute holds the KV of every position the request can feed: its
      // prompt and each output but the last.
      const int64_t positions = static_cast<int64_t>(prompt_len) + r->max_tokens - 1;
      if (!embedding_lm_->recomputes_kv()) {
        c->seq.reserved_tokens = static_cast<int>(std::min<int64_t>(positions, config_.max_model_len));
      }
    } else {
      c->seq.token_ids = request.prompt_token_ids;
      // Media placeholders are the same ids for any media: such a prompt's blocks are never shared.
      c->seq.media_prompt = r->media.has_value();
      c->seq.feeds_downstream = r->feeds_downstream;
    }
    if (detokenizer_) c->detokenizer = detokenizer_->start(request.prompt_token_ids, r->params.skip_special_tokens);
    completions_[&c->seq] = c.get();
    r->completions.push_back(std::move(c));
  }
  r->num_unfinished = r->params.n;
  r->input_open = embedding_lm_ && request.input_open;
  // A streamed request waits outside the scheduler until its prompt can be built.
  r->queued = !embedding_lm_ || embedding_lm_->ready(*r->state);
  if (r->queued) {
    for (auto& c : r->completions) scheduler_.add(c->seq);
  }
  std::string id = r->id;
  requests_.emplace(std::move(id), std::move(r));
}

void ArEngine::add_input(std::string_view request_id, std::span<const std::span<const uint8_t>> payloads, bool last) {
  auto it = requests_.find(std::string(request_id));
  if (it == requests_.end()) throw_error(ErrorCode::kInvalidArgument, "request {}: not in the engine", request_id);
  Request& r = *it->second;
  if (!r.input_open) {
    throw_error(ErrorCode::kInvalidArgument, "request {}: its input has ended; no more may follow", request_id);
  }
  embedding_lm_->add_input(*r.state, payloads, last);
  r.input_open = !last;
  if (!r.queued && embedding_lm_->ready(*r.state)) {
    r.queued = true;
    for (auto& c : r.completions) scheduler_.add(c->seq);
  }
}

bool ArEngine::can_step() const {
  if (in_flight_) return true;
  if (!embedding_lm_) return !requests_.empty();
  for (const auto& [id, r] : requests_) {
    if (embedding_lm_->ready(*r->state)) return true;
  }
  return false;
}

void ArEngine::update_awaiting_input() {
  for (auto& [id, r] : requests_) {
    if (!r->queued) continue;
    const bool waits = r->input_open && !embedding_lm_->ready(*r->state);
    for (auto& c : r->completions) c->seq.awaiting_input = waits;
  }
}

void ArEngine::add_media_rows(const model::MultimodalPrompt& media, const ScheduledSequence& s,
                              const model::SequenceSlice& slice) {
  const size_t hidden = media.rows.empty() ? 0 : media.values.size() / media.rows.size();
  const auto first = std::lower_bound(media.rows.begin(), media.rows.end(), s.context_len);
  for (auto it = first; it != media.rows.end() && *it < s.context_len + s.num_new_tokens; ++it) {
    batch_.input_rows.push_back(slice.query_start + (*it - s.context_len));
    const size_t index = static_cast<size_t>(it - media.rows.begin());
    const float* row = media.values.data() + index * hidden;
    batch_.input_row_values.insert(batch_.input_row_values.end(), row, row + hidden);
    // Every row of the batch has a value at every level (zeros where its prompt has none).
    for (size_t k = 0; k < batch_.input_row_deepstack.size(); ++k) {
      std::vector<float>& level = batch_.input_row_deepstack[k];
      if (k < media.deepstack.size()) {
        const float* extra = media.deepstack[k].data() + index * hidden;
        level.insert(level.end(), extra, extra + hidden);
      } else {
        level.insert(level.end(), hidden, 0.0f);
      }
    }
  }
}

void ArEngine::add_mrope_positions(const ScheduledSequence& s) {
  const Request& owner = completions_.at(s.seq)->request;
  const std::vector<float>* streams = owner.media ? &owner.media->mrope_positions : nullptr;
  const size_t prompt = owner.media ? owner.media->token_ids.size() : 0;
  const float delta = owner.media ? owner.media->rope_delta : 0.0f;
  for (int i = 0; i < s.num_new_tokens; ++i) {
    const int position = s.context_len + i;
    for (int stream = 0; stream < 3; ++stream) {
      auto value = static_cast<float>(position);
      if (streams != nullptr && !streams->empty() && static_cast<size_t>(position) < prompt) {
        value = (*streams)[stream * prompt + position];
      } else if (streams != nullptr && static_cast<size_t>(position) >= prompt) {
        value = static_cast<float>(position) + delta;
      }
      mrope_streams_[stream].push_back(value);
    }
  }
}

int ArEngine::start_embedding_request(const EngineRequest& request, SamplingParams& params, Request& r) {
  const std::string& id = request.request_id;
  if (params.n != 1) {
    throw_error(ErrorCode::kInvalidArgument, "request {}: sampling parameter 'n' must be 1 for this model, got {}", id,
                params.n);
  }
  model::ArRequestStart start =
      embedding_lm_->start_request({id, request.additional_information, params.max_tokens, params.seed,
                                    params.ignore_eos, params.greedy(), request.inputs, request.input_open});
  if (start.num_prompt_rows < 1 || start.num_prompt_rows > config_.max_model_len) {
    throw_error(ErrorCode::kInvalidArgument, "request {}: the prompt has {} rows, max_model_len is {}", id,
                start.num_prompt_rows, config_.max_model_len);
  }
  if (start.max_tokens) params.max_tokens = start.max_tokens;
  if (start.seed) params.seed = start.seed;
  r.state = std::move(start.state);
  r.suppressed_tokens = std::move(start.suppressed_tokens);
  return start.num_prompt_rows;
}

bool ArEngine::needs_host_history(const Request& r) {
  const SamplingParams& p = r.params;
  return p.logprobs || !p.logit_bias.empty() || p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
         p.frequency_penalty != 0.0f || (p.min_tokens > 0 && !r.min_tokens_stop_ids.empty());
}

std::vector<RequestOutput> ArEngine::step() {
  if (asleep_) throw_error(ErrorCode::kUnavailable, "the engine is asleep");
  const bool overlap = config_.async_scheduling && num_synchronous_requests_ == 0 && num_downstream_requests_ == 0;
  // The next step needs the tokens of the one in flight on the host: read them first.
  if (in_flight_ && !overlap) return finish_in_flight();
  if (embedding_lm_) update_awaiting_input();
  SchedulerOutput plan = scheduler_.schedule();
  ++num_steps_;
  last_step_num_seqs_ = static_cast<int>(plan.scheduled.size());
  last_step_num_tokens_ = plan.num_batched_tokens;
  if (plan.scheduled.empty()) return in_flight_ ? finish_in_flight() : std::vector<RequestOutput>{};

  batch_.token_ids.clear();
  batch_.positions.clear();
  batch_.seqs.clear();
  batch_.all_logits = false;
  batch_.input_rows.clear();
  batch_.input_row_values.clear();
  batch_.input_row_deepstack.clear();
  batch_.mrope_positions.clear();
  for (auto& stream : mrope_streams_) stream.clear();
  bool mrope = false;
  size_t deepstack_layers = 0;
  for (const ScheduledSequence& s : plan.scheduled) {
    const Request& owner = completions_.at(s.seq)->request;
    if (!owner.media) continue;
    mrope = mrope || !owner.media->mrope_positions.empty() || owner.media->rope_delta != 0.0f;
    deepstack_layers = std::max(deepstack_layers, owner.media->deepstack.size());
  }
  batch_.input_row_deepstack.resize(deepstack_layers);
  previous_rows_.clear();
  bool reads_previous_step = false;
  for (const ScheduledSequence& s : plan.scheduled) {
    model::SequenceSlice slice;
    slice.query_start = static_cast<int32_t>(batch_.positions.size());
    slice.query_len = s.num_new_tokens;
    slice.context_len = s.context_len;
    slice.block_table = s.seq->block_ids;
    slice.wants_logits = s.samples;
    if (const Request& owner = completions_.at(s.seq)->request; owner.media) add_media_rows(*owner.media, s, slice);
    if (mrope) add_mrope_positions(s);
    for (int i = 0; i < s.num_new_tokens && embedding_lm_; ++i) batch_.positions.push_back(s.context_len + i);
    for (int i = 0; i < s.num_new_tokens && !embedding_lm_; ++i) {
      const int position = s.context_len + i;
      if (position < s.seq->num_tokens()) {
        batch_.token_ids.push_back(s.seq->token_ids[position]);
        previous_rows_.push_back(-1);
      } else {
        // The placeholder: the token the step in flight picks for this sequence.
        const int row = completions_.at(s.seq)->in_flight_row;
        assert(row >= 0 && position == s.seq->num_tokens());
        batch_.token_ids.push_back(0);
        previous_rows_.push_back(row);
        reads_previous_step = true;
      }
      batch_.positions.push_back(position);
    }
    batch_.seqs.push_back(std::move(slice));
  }
  if (mrope) {
    for (const auto& stream : mrope_streams_)
      batch_.mrope_positions.insert(batch_.mrope_positions.end(), stream.begin(), stream.end());
  }
  sampling_.clear();
  for (const ScheduledSequence& s : plan.scheduled) {
    if (s.samples) sampling_.push_back(completions_.at(s.seq));
  }
  if (overlap) return launch_and_overlap(plan, reads_previous_step);
  batch_.capture = nullptr;
  if (num_downstream_requests_ > 0) {
    const auto feeds = [&](const ScheduledSequence& s) { return completions_.at(s.seq)->request.feeds_downstream; };
    if (std::any_of(plan.scheduled.begin(), plan.scheduled.end(), feeds)) {
      capture_.layer = *model_.downstream_layer();
      batch_.capture = &capture_;
    }
  }
  sampled_.resize(sampling_.size());
  forward_and_sample(plan);
  if (batch_.capture) keep_downstream_rows(plan);
  return finish_step();
}

std::vector<RequestOutput> ArEngine::launch_and_overlap(const SchedulerOutput& plan, bool reads_previous_step) {
  // No request needs its history on the host here, so every row is an argmax or ops::sample's.
  const SamplingPath path = sampling_path();
  assert(path != SamplingPath::kHost);
  device_params_.clear();
  if (path == SamplingPath::kDevice) {
    for (const Completion* c : sampling_) {
      device_params_.push_back(
          device_sampling_params(c->request.params, c->seq.prompt_token_ids(), c->seq.output_token_ids(), c->rng));
    }
  }
  model_.launch_step(batch_, device_params_,
                     reads_previous_step ? std::span<const int32_t>(previous_rows_) : std::span<const int32_t>());
  // The device draws with each stream's next uniform whatever the token turns out to be (greedy
  // rows draw nothing).
  for (Completion* c : sampling_) {
    if (!c->request.params.greedy()) c->rng.skip();
  }
  launched_rows_ = sampling_;
  std::vector<RequestOutput> outputs;
  if (in_flight_) outputs = finish_in_flight();
  // The placeholders this step read are real tokens now, so its full blocks can be registered in the
  // prefix cache; a later step that reads them runs after this one on the device. A request that the
  // step in flight finished is forgotten and its sequences freed, so they leave the plan first (no
  // request is added in between, so no new sequence can sit at a freed one's address).
  if (outputs.empty()) {
    scheduler_.complete(plan);
  } else {
    SchedulerOutput live = plan;
    std::erase_if(live.scheduled, [&](const ScheduledSequence& s) { return !completions_.contains(s.seq); });
    scheduler_.complete(live);
  }
  in_flight_rows_ = std::move(launched_rows_);
  launched_rows_.clear();
  in_flight_ = true;
  for (size_t row = 0; row < in_flight_rows_.size(); ++row) {
    Completion* c = in_flight_rows_[row];
    if (c == nullptr || c->finish_reason) {
      in_flight_rows_[row] = nullptr;
      continue;
    }
    c->in_flight_row = static_cast<int>(row);
    // A token that surely ends the sequence (by length) gets no successor scheduled.
    const bool ends =
        c->seq.num_tokens() + 1 >= config_.max_model_len || c->seq.num_output_tokens() + 1 >= c->request.max_tokens;
    c->seq.num_placeholders = ends ? 0 : 1;
  }
  return outputs;
}

std::vector<RequestOutput> ArEngine::finish_in_flight() {
  // Whatever happens, this step is no longer in flight (wait_step consumed it).
  in_flight_ = false;
  model_.wait_step(sampled_ids_);
  if (sampled_ids_.size() != in_flight_rows_.size()) {
    throw_error(ErrorCode::kInternal, "the model returned {} sampled tokens for {} rows", sampled_ids_.size(),
                in_flight_rows_.size());
  }
  sampling_.clear();
  sampled_.clear();
  for (size_t row = 0; row < in_flight_rows_.size(); ++row) {
    Completion* c = in_flight_rows_[row];
    if (c == nullptr) continue;
    c->in_flight_row = -1;
    c->seq.num_placeholders = 0;
    // Ended by the step before this one: this token is discarded (vLLM does the same).
    if (c->finish_reason) continue;
    sampling_.push_back(c);
    sampled_.emplace_back().token_id = sampled_ids_[row];
  }
  in_flight_rows_.clear();
  return finish_step();
}

ArEngine::SamplingPath ArEngine::sampling_path() const {
  bool plain_argmax = true;
  for (const Completion* c : sampling_) {
    if (needs_host_sampler(*c)) return SamplingPath::kHost;
    plain_argmax = plain_argmax && picks_plain_argmax(*c);
  }
  return plain_argmax ? SamplingPath::kArgmax : SamplingPath::kDevice;
}

void ArEngine::forward_and_sample(const SchedulerOutput& plan) {
  if (embedding_lm_) {
    forward_embedding_lm(plan);
    return;
  }
  const SamplingPath path = sampling_.empty() ? SamplingPath::kHost : sampling_path();
  if (path != SamplingPath::kHost) {
    // The model picks the tokens where the logits are (on a GPU only the ids cross to the host).
    if (path == SamplingPath::kArgmax) {
      model_.forward_greedy(batch_, sampled_ids_);
    } else {
      device_params_.clear();
      for (const Completion* c : sampling_) {
        device_params_.push_back(
            device_sampling_params(c->request.params, c->seq.prompt_token_ids(), c->seq.output_token_ids(), c->rng));
      }
      model_.forward_sample(batch_, device_params_, sampled_ids_);
    }
    scheduler_.complete(plan);
    if (sampled_ids_.size() != sampling_.size()) {
      throw_error(ErrorCode::kInternal, "the model returned {} sampled tokens for {} rows", sampled_ids_.size(),
                  sampling_.size());
    }
    for (size_t row = 0; row < sampling_.size(); ++row) {
      sampled_[row] = SampledToken();
      sampled_[row].token_id = sampled_ids_[row];
      // The device drew with the stream's next uniform (greedy rows draw nothing).
      if (!sampling_[row]->request.params.greedy()) sampling_[row]->rng.skip();
    }
    return;
  }
  model_.forward(batch_, logits_);
  scheduler_.complete(plan);
  sample_on_host();
}

void ArEngine::forward_embedding_lm(const SchedulerOutput& plan) {
  step_states_.clear();
  for (const ScheduledSequence& s : plan.scheduled) {
    Request& r = completions_.at(s.seq)->request;
    if (!r.acquired) {
      embedding_lm_->acquire(*r.state);
      r.acquired = true;
    }
    step_states_.push_back(r.state.get());
  }
  embedding_lm_->forward_step(batch_, step_states_, logits_);
  scheduler_.complete(plan);
  const size_t vocab = static_cast<size_t>(info_.vocab_size);
  for (size_t row = 0; row < sampling_.size() && logits_.size() >= sampling_.size() * vocab; ++row) {
    float* logits = logits_.data() + row * vocab;
    for (const model::TokenRange& range : sampling_[row]->request.suppressed_tokens) {
      const int32_t end = std::min(range.end, static_cast<int32_t>(vocab));
      for (int32_t t = std::max(range.first, 0); t < end; ++t) logits[t] = -std::numeric_limits<float>::infinity();
    }
  }
  sample_on_host();
  sampled_rows_.clear();
  for (size_t row = 0; row < sampling_.size(); ++row) {
    const Completion& c = *sampling_[row];
    sampled_rows_.push_back({c.request.state.get(), sampled_[row].token_id, c.rng.seed(), c.seq.num_output_tokens()});
  }
  step_outputs_.assign(sampling_.size(), {});
  embedding_lm_->finish_step(sampled_rows_, step_outputs_);
  if (step_outputs_.size() != sampling_.size()) {
    throw_error(ErrorCode::kInternal, "the model returned {} step outputs for {} rows", step_outputs_.size(),
                sampling_.size());
  }
}

void ArEngine::sample_on_host() {
  // Sampling reads only each sequence's own row, tokens and random stream, so rows are sampled in
  // parallel (a fixed split, each part with its own Sampler scratch); appending tokens, which touches
  // shared state, stays serial and in batch order.
  const size_t vocab = static_cast<size_t>(info_.vocab_size);
  if (logits_.size() < sampling_.size() * vocab) {
    throw_error(ErrorCode::kInternal, "the model returned {} logits for {} rows of {}", logits_.size(),
                sampling_.size(), vocab);
  }
  const int64_t parts = std::min<int64_t>(static_cast<int64_t>(sampling_.size()), tensor::cpu::thread_count());
  if (static_cast<int64_t>(samplers_.size()) < parts) samplers_.resize(parts);
  tensor::cpu::parallel_for(parts, 1, [&](int64_t first_part, int64_t end_part) {
    for (int64_t part = first_part; part < end_part; ++part) {
      size_t begin = sampling_.size() * part / parts;
      size_t end = sampling_.size() * (part + 1) / parts;
      for (size_t row = begin; row < end; ++row) {
        Completion& c = *sampling_[row];
        const Request& r = c.request;
        std::span<float> logits(logits_.data() + row * vocab, vocab);
        sampled_[row] = samplers_[part].sample(
            logits,
            SamplingState{r.params, c.seq.prompt_token_ids(), c.seq.output_token_ids(), r.min_tokens_stop_ids, c.rng});
      }
    }
  });
}

bool ArEngine::needs_host_sampler(const Completion& c) const {
  const SamplingParams& p = c.request.params;
  return p.logprobs || !p.logit_bias.empty() || min_tokens_masks(c);
}

bool ArEngine::min_tokens_masks(const Completion& c) const {
  return c.seq.num_output_tokens() < c.request.params.min_tokens && !c.request.min_tokens_stop_ids.empty();
}

bool ArEngine::picks_plain_argmax(const Completion& c) const {
  const SamplingParams& p = c.request.params;
  return p.greedy() && !needs_host_sampler(c) && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
         p.frequency_penalty == 0.0f;
}

void ArEngine::keep_downstream_rows(const SchedulerOutput& plan) {
  const size_t tokens = batch_.positions.size();
  const size_t hidden = tokens == 0 ? 0 : capture_.embeddings.size() / tokens;
  if (capture_.embeddings.size() != tokens * hidden || capture_.hidden.size() != tokens * hidden) {
    throw_error(ErrorCode::kInternal, "the model captured {} and {} values for {} rows", capture_.embeddings.size(),
                capture_.hidden.size(), tokens);
  }
  for (size_t i = 0; i < plan.scheduled.size(); ++i) {
    const ScheduledSequence& s = plan.scheduled[i];
    Completion& c = *completions_.at(s.seq);
    if (!c.request.feeds_downstream) continue;
    const size_t start = static_cast<size_t>(batch_.seqs[i].query_start);
    for (int k = 0; k < s.num_new_tokens; ++k) {
      const int position = s.context_len + k;
      if (position < c.downstream_until) continue;
      if (c.downstream_ids.empty()) c.downstream_first = position;
      c.downstream_until = position + 1;
      const size_t row = start + static_cast<size_t>(k);
      c.downstream_ids.push_back(batch_.token_ids[row]);
      const auto values = [&](const std::vector<float>& from) { return from.begin() + row * hidden; };
      c.downstream_embeddings.insert(c.downstream_embeddings.end(), values(capture_.embeddings),
                                     values(capture_.embeddings) + hidden);
      c.downstream_hidden.insert(c.downstream_hidden.end(), values(capture_.hidden), values(capture_.hidden) + hidden);
    }
  }
  // Each sampled token takes the rows kept for it: the step output of that token.
  step_outputs_.assign(sampling_.size(), {});
  for (size_t row = 0; row < sampling_.size(); ++row) {
    Completion& c = *sampling_[row];
    if (!c.request.feeds_downstream || c.downstream_ids.empty()) continue;
    model::DownstreamRows rows;
    rows.token_ids = c.downstream_ids;
    rows.first_position = c.downstream_first;
    rows.prompt_length = c.seq.num_prompt_tokens;
    rows.hidden_size = static_cast<int>(hidden);
    rows.embeddings = c.downstream_embeddings;
    rows.hidden = c.downstream_hidden;
    if (rows.first_position == 0 && c.request.media) rows.prompt_positions = c.request.media->mrope_positions;
    step_outputs_[row] = model_.encode_downstream_rows(rows);
    c.downstream_ids.clear();
    c.downstream_embeddings.clear();
    c.downstream_hidden.clear();
  }
}

std::vector<RequestOutput> ArEngine::finish_step() {
  std::vector<Request*> touched;
  for (size_t row = 0; row < sampling_.size(); ++row) {
    Completion& c = *sampling_[row];
    if (embedding_lm_ || c.request.feeds_downstream) c.unsent_step_outputs.push_back(std::move(step_outputs_[row]));
    append_token(c, sampled_[row]);
    Request& r = c.request;
    if (!r.in_step_output) {
      r.in_step_output = true;
      touched.push_back(&r);
    }
  }

  std::vector<RequestOutput> outputs;
  outputs.reserve(touched.size());
  for (Request* r : touched) {
    r->in_step_output = false;
    outputs.push_back(take_output(*r));
    if (outputs.back().finished) forget(*r);
  }
  return outputs;
}

void ArEngine::append_token(Completion& c, const SampledToken& sampled) {
  Request& r = c.request;
  const SamplingParams& params = r.params;
  int32_t token = sampled.token_id;
  c.seq.token_ids.push_back(token);
  if (params.logprobs) c.unsent_logprobs.push_back(sampled);

  // Token-level stops, in vLLM's order: length first, then (once min_tokens exist) EOS and stop tokens.
  int num_output = c.seq.num_output_tokens();
  std::optional<FinishReason> reason;
  if (c.seq.num_tokens() >= config_.max_model_len || num_output >= r.max_tokens) {
    reason = FinishReason::kLength;
  } else if (num_output >= params.min_tokens) {
    bool eos = !params.ignore_eos &&
               std::find(info_.eos_token_ids.begin(), info_.eos_token_ids.end(), token) != info_.eos_token_ids.end();
    if (eos) {
      reason = FinishReason::kStop;
    } else if (std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), token) !=
               params.stop_token_ids.end()) {
      reason = FinishReason::kStop;
      c.stop_reason = token;
    }
  }

  // The token that stopped the sequence is not part of its text unless asked for.
  bool stopped_by_token = reason == FinishReason::kStop;
  if (c.detokenizer && (!stopped_by_token || params.include_stop_str_in_output)) {
    size_t before = c.text.size();
    c.text += c.detokenizer->push(token);
    if (!stopped_by_token && !params.stop.empty() && num_output > params.min_tokens) {
      if (auto match =
              find_stop_string(c.text, c.text.size() - before, params.stop, params.include_stop_str_in_output)) {
        reason = FinishReason::kStop;
        c.stop_reason = params.stop[match->stop_index];
        if (match->truncate_to != std::string::npos) c.text.resize(match->truncate_to);
      }
    }
  }
  if (reason) finish(c, *reason);
}

void ArEngine::finish(Completion& c, FinishReason reason) {
  assert(!c.finish_reason);
  c.finish_reason = reason;
  scheduler_.remove(c.seq);
  c.seq.status = SequenceStatus::kFinished;
  --c.request.num_unfinished;
}

CompletionOutput ArEngine::take_delta(Completion& c) {
  CompletionOutput out;
  out.index = c.index;
  auto output_tokens = c.seq.output_token_ids();
  out.token_ids.assign(output_tokens.begin() + c.tokens_sent, output_tokens.end());
  c.tokens_sent = static_cast<int>(output_tokens.size());
  out.logprobs = std::move(c.unsent_logprobs);
  c.unsent_logprobs.clear();
  out.step_outputs = std::move(c.unsent_step_outputs);
  c.unsent_step_outputs.clear();

  size_t end = c.text.size();
  if (!c.finish_reason) {
    end = end > c.request.text_holdback ? end - c.request.text_holdback : 0;
    // Never split a UTF-8 character between two outputs.
    while (end > c.text_sent && end < c.text.size() && (static_cast<unsigned char>(c.text[end]) & 0xC0) == 0x80) --end;
  }
  if (end > c.text_sent) {
    out.text = c.text.substr(c.text_sent, end - c.text_sent);
    c.text_sent = end;
  }
  if (c.finish_reason) {
    out.finish_reason = c.finish_reason;
    out.stop_reason = c.stop_reason;
    c.finish_sent = true;
  }
  return out;
}

RequestOutput ArEngine::take_output(Request& r) {
  RequestOutput out;
  out.request_id = r.id;
  out.num_prompt_tokens = r.completions.front()->seq.num_prompt_tokens;
  for (auto& c : r.completions) {
    bool has_news = c->tokens_sent < c->seq.num_output_tokens() || (c->finish_reason && !c->finish_sent);
    if (has_news) out.completions.push_back(take_delta(*c));
  }
  out.finished = r.num_unfinished == 0;
  return out;
}

void ArEngine::forget(Request& r) {
  if (needs_host_history(r)) --num_synchronous_requests_;
  if (r.feeds_downstream) --num_downstream_requests_;
  if (r.acquired) embedding_lm_->release(*r.state);
  for (auto& c : r.completions) {
    std::replace(in_flight_rows_.begin(), in_flight_rows_.end(), c.get(), static_cast<Completion*>(nullptr));
    std::replace(launched_rows_.begin(), launched_rows_.end(), c.get(), static_cast<Completion*>(nullptr));
    completions_.erase(&c->seq);
  }
  requests_.erase(r.id);
}

std::optional<RequestOutput> ArEngine::abort(std::string_view request_id, std::optional<Error> error) {
  auto it = requests_.find(std::string(request_id));
  if (it == requests_.end()) return std::nullopt;
  Request& r = *it->second;
  for (auto& c : r.completions) {
    if (!c->finish_reason) finish(*c, FinishReason::kAbort);
  }
  RequestOutput out = take_output(r);
  out.error = std::move(error);
  forget(r);
  return out;
}

std::vector<RequestOutput> ArEngine::abort_all(const std::optional<Error>& error) {
  std::vector<std::string> ids;
  for (const auto& [id, r] : requests_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  std::vector<RequestOutput> outputs;
  for (const std::string& id : ids) outputs.push_back(*abort(id, error));
  return outputs;
}

EngineStats ArEngine::stats() const {
  EngineStats s;
  s.num_blocks = kv_.num_blocks();
  s.num_free_blocks = kv_.num_free_blocks();
  s.num_running = scheduler_.num_running();
  s.num_waiting = scheduler_.num_waiting();
  s.num_preemptions = scheduler_.num_preemptions();
  s.num_steps = num_steps_;
  s.last_step_num_seqs = last_step_num_seqs_;
  s.last_step_num_tokens = last_step_num_tokens_;
  s.prefix_cache = kv_.stats();
  return s;
}

}  // namespace omni::engine
