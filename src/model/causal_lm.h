// The contract between an autoregressive stage model and the engine that drives it.
//
// The engine (engine/ArEngine) owns scheduling and the *bookkeeping* of the paged KV cache:
// which block ids belong to which sequence. The model owns the KV *storage*: after
// init_kv_cache(n) it holds n blocks of kKvBlockSize token slots per layer, and forward()
// reads and writes exactly the slots the batch's block tables name. One thread (the stage's
// engine loop) calls every method; a CausalLm is not thread-safe.
//
// A model on a GPU keeps its weights, KV cache and activations there; what crosses to the host is
// what forward() returns (logits rows), or only token ids through forward_greedy() and
// forward_sample().
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "base/json.h"
#include "tensor/device.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace omni::model {

// Tokens per KV block (vLLM's default block size).
inline constexpr int kKvBlockSize = 16;

// One sequence's part of a forward batch: `query_len` new tokens starting at `query_start` in
// ForwardBatch::token_ids, appended after `context_len` tokens already in its KV blocks.
// block_table[i] is the pool block holding token positions [i*kKvBlockSize, (i+1)*kKvBlockSize)
// and must cover context_len + query_len tokens.
struct SequenceSlice {
  int32_t query_start = 0;
  int32_t query_len = 0;
  int32_t context_len = 0;
  std::vector<int32_t> block_table;
  // Whether this slice produces logits for its last token (false for a prefill chunk that does
  // not reach the end of the prompt).
  bool wants_logits = true;
};

struct ForwardBatch {
  std::vector<int32_t> token_ids;  // all slices' new tokens, concatenated
  std::vector<int32_t> positions;  // position of each token in its sequence
  std::vector<SequenceSlice> seqs;
  // When true, logits are returned for every token of every slice (used for --dump-logits and
  // prompt logprobs), not only for the last token of slices that want them.
  bool all_logits = false;
  // A model with multimodal RoPE (TextModelConfig::rope.mrope_section): the temporal, height and
  // width position of each token, [3 * tokens] (all t, then all h, then all w); floats, as a video's
  // temporal positions may be fractional (Qwen3-Omni at 1.5 fps: 17.33 per temporal patch). Empty:
  // the three streams equal `positions` (text), which makes every M-RoPE layout the plain rotation.
  std::vector<float> mrope_positions;
  // Rows whose input is given instead of their token's embedding (the encoder rows of a multimodal
  // prompt's placeholders): batch position input_rows[i] takes row i of input_row_values,
  // [input_rows.size(), hidden_size] float32. Empty: every row is its token's embedding.
  std::vector<int32_t> input_rows;
  std::vector<float> input_row_values;
  // DeepStack (Qwen3-VL, Qwen3-Omni): input_row_deepstack[k] [input_rows.size(), hidden_size] is
  // added to the output of decoder layer k at the input_rows (zero rows where a row has none, as
  // audio rows). Empty: nothing is added.
  std::vector<std::vector<float>> input_row_deepstack;

  // What a downstream stage reads of this forward (the Qwen3-Omni talker reads the thinker's rows),
  // through forward(), forward_greedy() and forward_sample() of a decoder (a batch with a capture
  // never runs as a fixed-size decode step, nor asynchronously): with `capture` set, capture->embeddings receives
  // every row's input embedding and capture->hidden the output of decoder layer capture->layer - 1
  // (Hugging Face's hidden_states[layer]: the embeddings for layer 0, before any DeepStack add), or
  // for layer num_layers + 1 the final norm's output (what the Qwen2.5-Omni talker reads as
  // hidden_states[-1]), host float32 [tokens, hidden_size] each. kInvalidArgument for a layer outside
  // 0..num_layers + 1.
  struct HiddenCapture {
    int layer = 0;
    std::vector<float> embeddings;
    std::vector<float> hidden;
  };
  HiddenCapture* capture = nullptr;
};

// The key of a request's additional_information under which its media travel to the stage (the
// server's decoded chat content parts), as vLLM's prompt field of that name: {"audio": [{"data":
// base64 of little-endian float32 mono samples, "sample_rate": n, "source": "messages[i].content[j]"},
// …]}.
inline constexpr const char* kMultiModalData = "multi_modal_data";
// The key of a request's additional_information under which the processor kwargs the stage applies
// travel (the chat request's mm_processor_kwargs that the server does not apply itself, e.g.
// {"min_pixels": n, "max_pixels": m}).
inline constexpr const char* kMmProcessorKwargs = "mm_processor_kwargs";

// A prompt whose request carries media: the token ids with each media placeholder expanded to the
// rows its encoder gives, and those rows, which replace the placeholders' embeddings
// (ForwardBatch::input_rows).
struct MultimodalPrompt {
  std::vector<int32_t> token_ids;
  std::vector<int32_t> rows;  // prompt positions, ascending
  std::vector<float> values;  // [rows.size(), hidden_size]
  // Per DeepStack layer k, [rows.size(), hidden_size] added after decoder layer k
  // (ForwardBatch::input_row_deepstack); empty for none.
  std::vector<std::vector<float>> deepstack;
  // The prompt's M-RoPE position streams [3 * token_ids.size()] (all t, then h, then w) when they
  // are not the plain positions (image and video grids), and the rope delta that a generated token
  // at index p takes on all three streams (position p + rope_delta; both may be fractional). Empty:
  // plain positions.
  std::vector<float> mrope_positions;
  float rope_delta = 0.0f;
};

// One request's rows of the forwards up to a step that sampled for it, as a downstream stage reads
// them (CausalLm::encode_downstream_rows): consecutive positions from first_position on.
struct DownstreamRows {
  std::span<const int32_t> token_ids;  // each position's input token (media placeholders expanded)
  int first_position = 0;
  int prompt_length = 0;  // the request's prompt as the model fed it
  int hidden_size = 0;
  std::span<const float> embeddings;  // [token_ids.size(), hidden_size]: each row's input embedding
  std::span<const float> hidden;      // [token_ids.size(), hidden_size]: downstream_layer()'s output
  // With first_position 0, the prompt's M-RoPE streams [3 * prompt_length] (all t, then h, then w;
  // MultimodalPrompt::mrope_positions) when they are not the plain positions; else empty.
  std::span<const float> prompt_positions;
};

struct CausalLmInfo {
  int vocab_size = 0;
  int max_position_embeddings = 0;
  std::vector<int32_t> eos_token_ids;  // from generation_config.json, else config.json
  // Whether the sampled ids are tokens of the checkpoint's tokenizer (text to detokenize).
  bool text_tokens = true;
};

class CausalLm {
 public:
  virtual ~CausalLm() = default;

  virtual const CausalLmInfo& info() const = 0;
  // Bytes of KV storage one block takes over all layers (for sizing the pool from a budget).
  virtual size_t kv_bytes_per_block() const = 0;
  // (Re)allocates the KV storage for `num_blocks` blocks; previous contents are discarded.
  virtual void init_kv_cache(int num_blocks) = 0;
  // Runs the batch, writes the new tokens' K/V into their slots, and returns logits row-major:
  // one row of vocab_size floats per slice with wants_logits (in slice order), or per token
  // when all_logits. Throws omni::Error(kInvalidArgument) for token ids outside the vocabulary.
  virtual void forward(const ForwardBatch& batch, std::vector<float>& logits) = 0;
  // Like forward(), but returns one token id per logits row: the index of its largest logit (the
  // lowest on ties), so that a model on a GPU copies ids, not rows, to the host. batch.all_logits
  // must be false. This default picks from forward()'s rows.
  virtual void forward_greedy(const ForwardBatch& batch, std::vector<int32_t>& token_ids) {
    std::vector<float> logits;
    forward(batch, logits);
    const size_t vocab = static_cast<size_t>(info().vocab_size);
    token_ids.clear();
    for (size_t row = 0; vocab > 0 && (row + 1) * vocab <= logits.size(); ++row) {
      const float* first = logits.data() + row * vocab;
      token_ids.push_back(static_cast<int32_t>(std::max_element(first, first + vocab) - first));
    }
  }

  // Like forward(), but draws one token id per logits row with ops::sample and params[row] (its
  // penalties, filters and Philox draw; params.size() must equal the rows), where the logits are:
  // on a GPU only the ids cross to the host. batch.all_logits must be false. Throws as forward()
  // and as ops::sample for bad params. This default samples forward()'s rows on the host, which
  // draws the same ids as the CPU backend.
  virtual void forward_sample(const ForwardBatch& batch, std::span<const tensor::ops::SamplingParams> params,
                              std::vector<int32_t>& token_ids) {
    std::vector<float> logits;
    forward(batch, logits);
    const int64_t vocab = info().vocab_size;
    const int64_t rows = vocab > 0 ? static_cast<int64_t>(logits.size()) / vocab : 0;
    token_ids.resize(static_cast<size_t>(rows));
    if (rows == 0) return;
    tensor::Tensor host = tensor::Tensor::borrow(logits.data(), {rows, vocab}, tensor::DType::kF32);
    tensor::Tensor ids = tensor::Tensor::borrow(token_ids.data(), {rows}, tensor::DType::kI32);
    tensor::ops::sample(host, params, ids);
  }

  // Asynchronous steps, for the engine's async scheduling (vLLM's --async-scheduling): the engine
  // launches step N+1 before it has read step N's ids, so that it schedules N+1 on the CPU while N
  // runs on the device. launch_step() enqueues forward_greedy(batch) (params empty) or
  // forward_sample(batch, params) and returns without waiting for the ids; wait_step() returns the
  // ids of the oldest launched step not yet waited for, in the same form as those calls. Token i of
  // the batch takes as its input, instead of batch.token_ids[i], the id that the previously launched
  // step picked in row previous_rows[i] when that is >= 0 (previous_rows is empty or one entry per
  // token): a model on a GPU reads it there, with no round trip through the host. At most two
  // steps are outstanding (launched and not waited for); a step is waited for before the one after
  // the next is launched. Errors as forward_greedy/forward_sample, from either call, and
  // kInvalidArgument for a previous row the previous step does not have. This default runs the step
  // synchronously in launch_step (so the engine's pipelining is the same on every backend, with no
  // overlap) and keeps its ids for wait_step.
  virtual void launch_step(const ForwardBatch& batch, std::span<const tensor::ops::SamplingParams> params,
                           std::span<const int32_t> previous_rows);
  virtual void wait_step(std::vector<int32_t>& token_ids);

  // Fixed-size decode steps (CUDA graphs). After init_kv_cache, the engine may hand the batch sizes
  // it will pad decode steps to (ascending, each >= 1) and the widest block table a sequence can
  // have. A model that accepts (returns true) then runs every forward_greedy batch whose slices are
  // all one token that wants logits, no more than the largest size and with tables no wider, as the
  // smallest size that holds it: the padding rows compute nothing that reaches the KV cache or the
  // returned ids, and the ids equal an unpadded run's up to the rounding of a different batch
  // shape. With `capture_graphs` each size is recorded once here (tensor/device_graph.h) and a step
  // is one replay; without, the same ops run one by one, so both give identical ids. Other batches
  // take the ordinary path. Calling again replaces the sizes (and drops earlier recordings). This
  // default declines.
  virtual bool prepare_decode_steps(const std::vector<int>& batch_sizes, int max_blocks_per_seq, bool capture_graphs) {
    (void)batch_sizes;
    (void)max_blocks_per_seq;
    (void)capture_graphs;
    return false;
  }

  // Where the weights, the KV cache and the activations live.
  virtual tensor::Device device() const { return tensor::Device::cpu(); }
  // Device memory a forward of up to `max_tokens` tokens and `max_logit_rows` logits rows needs
  // besides the weights and the KV cache (activations, scratch); the engine keeps it out of the KV
  // budget of a GPU.
  // The prompt of a request whose additional_information carries media (kMultiModalData); nullopt
  // when it carries none. Throws omni::Error(kInvalidArgument) naming the media's source for media
  // the model cannot read (this default: any). Called by the engine's thread when the request is
  // added; the encoders run then.
  virtual std::optional<MultimodalPrompt> prepare_multimodal_prompt(std::span<const int32_t> prompt,
                                                                    const Json& additional_information);
  virtual size_t activation_bytes(int max_tokens, int max_logit_rows) const {
    (void)max_tokens;
    (void)max_logit_rows;
    return 0;
  }

  // What a downstream stage reads of a request's forwards (the Qwen3-Omni talker reads the
  // thinker's rows): the layer whose output it takes (ForwardBatch::HiddenCapture::layer), nullopt
  // when the model gives none. The engine then runs the steps of a request that feeds a downstream
  // stage with a capture, and each step that samples for it gives, as that token's step output, the
  // payload encode_downstream_rows() makes of the rows computed since the previous one.
  virtual std::optional<int> downstream_layer() const { return std::nullopt; }
  // Called only when downstream_layer() is set; this default throws kUnsupported.
  virtual std::vector<uint8_t> encode_downstream_rows(const DownstreamRows& rows) const;

 private:
  // The default launch_step's results: the latest launched step's ids, and those not yet waited for.
  std::vector<int32_t> launched_ids_;
  std::deque<std::vector<int32_t>> unwaited_ids_;
};

}  // namespace omni::model
