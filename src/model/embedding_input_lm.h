// The contract between an autoregressive stage model that builds its own input rows and the engine
// that drives it (engine/ArEngine). A text LM is a plain CausalLm: the engine feeds it token ids.
// An EmbeddingInputLm is a CausalLm whose requests are not token ids: the model creates a state per
// request from the request's additional_information, feeds its prompt as rows it builds
// (embeddings), builds every decode row from what its last step produced, and may run a per-step
// sub-model on the sampled tokens whose result (e.g. a frame of codes) leaves the stage as that
// step's extra output.
//
// The engine still owns scheduling, the KV bookkeeping and the sampling of the model's logits; the
// model owns the KV storage (as a CausalLm), its per-request states and the per-request resources
// behind them. One thread (the stage's engine loop) calls every method; not thread-safe.
//
// A step, as the engine runs it: forward_step() over the scheduled slices (a slice with
// context_len 0 is a whole prompt; the others are one decode row each), the host sampler over the
// returned logits (each request's suppressed token ranges first), then finish_step() with the
// sampled tokens, which returns each row's extra output. Prompts are fed whole (no chunked prefill)
// and never prefix-cached: their rows are not token ids that a hash could name.
//
// A model may also read what an upstream stage sends (the Qwen3-Omni talker reads the thinker's
// rows): start_request gets the payloads so far and, while the upstream stage still generates,
// add_input the later ones. A request whose next step needs input that has not come yet is not
// ready(); the engine schedules it again once it is.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "model/causal_lm.h"

namespace omni::model {

// What a stage model keeps for one request (its prompt plan, what its next decode row is built
// from, its per-request resources). Created by start_request, owned by the engine until the
// request ends.
class ArRequestState {
 public:
  virtual ~ArRequestState() = default;
};

// A request as the stage model sees it when it starts: its fields, the sampling parameters that
// the model's own request fields may override, and what its upstream stage sent so far.
struct ArRequestInput {
  std::string_view request_id;
  const Json& additional_information;
  std::optional<int> max_tokens;  // sampling_params.max_tokens
  std::optional<int64_t> seed;    // sampling_params.seed
  bool ignore_eos = false;
  bool greedy = false;  // the request's own tokens are picked greedily (temperature 0)
  // The upstream stage's payloads so far, in order (read during start_request only), and whether
  // more follow through add_input (the upstream stage still generates: async_chunk).
  std::span<const std::span<const uint8_t>> inputs;
  bool input_open = false;
};

// The field `key` of a request's additional_information as T; nullopt when absent or null.
// kInvalidArgument naming the request and the field when it has another type.
template <typename T>
std::optional<T> request_field(const Json& additional_information, const char* key, std::string_view request_id) {
  auto it = additional_information.find(key);
  if (it == additional_information.end() || it->is_null()) return std::nullopt;
  try {
    return it->get<T>();
  } catch (const std::exception&) {
    throw_error(ErrorCode::kInvalidArgument, "request {}: additional_information.{} has the wrong type ({})",
                request_id, key, it->dump());
  }
}

// Token ids in [first, end) that a request never samples: their logits are -inf before sampling.
struct TokenRange {
  int32_t first = 0;
  int32_t end = 0;
};

struct ArRequestStart {
  std::unique_ptr<ArRequestState> state;
  // The prompt's rows (KV positions before the first output), at least 1.
  int num_prompt_rows = 0;
  // What the request generates at most and the seed of its random stream, the model's request
  // fields and defaults applied over ArRequestInput's.
  std::optional<int> max_tokens;
  std::optional<int64_t> seed;
  std::vector<TokenRange> suppressed_tokens;
};

// The model's sampling defaults (its generation_config.json), under the request's parameters.
struct ArSamplingDefaults {
  std::optional<float> temperature;
  std::optional<int> top_k;
  std::optional<float> top_p;
  std::optional<float> repetition_penalty;
  std::optional<int> min_tokens;
};

// One sampled row of a step, in the order of forward_step's logits rows.
struct ArSampledRow {
  ArRequestState* state = nullptr;
  int32_t token = 0;
  uint64_t seed = 0;          // the seed of the request's random stream
  int num_output_tokens = 0;  // tokens the request sampled before this one
};

// The time one part of a step took (the model's own breakdown, for the stage's metrics).
struct StepPartTime {
  std::string part;
  double seconds = 0;
};

class EmbeddingInputLm : public CausalLm {
 public:
  // Sampling request keys this model does not take (a pipeline's sampling constraints may set
  // them for other implementations); the stage drops them before parsing.
  virtual std::vector<std::string> ignored_sampling_keys() const { return {}; }
  virtual ArSamplingDefaults sampling_defaults() const = 0;

  // Checks the request and plans its prompt. Throws omni::Error(kInvalidArgument) naming the
  // request field at fault; nothing is kept then.
  virtual ArRequestStart start_request(const ArRequestInput& input) = 0;
  // Per-request resources for up to `max_num_seqs` running requests (called once, after
  // init_kv_cache and before prepare_decode_steps). `batch_sizes`: the sizes the engine pads
  // fixed-size steps to (ascending), for the model's own fixed-size steps; `capture_graphs`: those
  // may be CUDA graphs.
  virtual void prepare_requests(int max_num_seqs, const std::vector<int>& batch_sizes, bool capture_graphs) = 0;
  // A request enters the running set (at most max_num_seqs hold resources at once) / a request
  // that entered it ends (finished or aborted).
  virtual void acquire(ArRequestState& state) = 0;
  virtual void release(ArRequestState& state) = 0;
  // Streamed input (a request started with input_open): the next payloads of its upstream stage,
  // `last` when the upstream stage finished. Throws omni::Error(kInvalidArgument) naming what is
  // wrong with the input (the engine then ends the request); this default takes none
  // (kUnsupported).
  virtual void add_input(ArRequestState& state, std::span<const std::span<const uint8_t>> payloads, bool last) {
    (void)state;
    (void)payloads;
    (void)last;
    throw_error(ErrorCode::kUnsupported, "this stage model takes no streamed input");
  }
  // Whether the request's next step (its prompt, or its next decode row) can be built from the
  // input it has; one that cannot waits, holding its KV, until add_input makes it ready. A request
  // whose input is complete is always ready.
  virtual bool ready(const ArRequestState& state) const {
    (void)state;
    return true;
  }

  // Whether the model can recompute a request's KV from the request alone. A model that cannot (its
  // decode rows depend on sub-model outputs it does not keep) has the KV of its whole prompt +
  // max_tokens reserved when it starts and is never preempted.
  virtual bool recomputes_kv() const { return false; }

  // Runs one step: states[i] is the request of batch.seqs[i]; a slice with context_len 0 is the
  // request's whole prompt, any other one decode row built from the request's last finish_step.
  // batch.token_ids is empty. Returns one logits row per slice (info().vocab_size floats), as
  // forward(). Throws as forward().
  virtual void forward_step(const ForwardBatch& batch, std::span<ArRequestState* const> states,
                            std::vector<float>& logits) = 0;
  // The step's sampled tokens, one per row of forward_step's logits: runs the per-step sub-model
  // and fills outputs[i] with row i's extra output (empty: none, e.g. for a stop token).
  virtual void finish_step(std::span<const ArSampledRow> rows, std::vector<std::vector<uint8_t>>& outputs) = 0;
  // The parts of the steps since the last call.
  virtual std::vector<StepPartTime> take_step_times() { return {}; }
};

}  // namespace omni::model
