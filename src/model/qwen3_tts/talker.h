// The Qwen3-TTS talker as computation (docs/models/qwen3_tts.md, "The talker", "The code predictor"):
// the talker stack that predicts codebook 0 from caller-built input rows, and the code predictor
// (MTP) that predicts codebooks 1..G-1 of each frame with its own small KV cache. Both stacks are DecoderLm (the
// Qwen3 layer, q/k norm, NeoX RoPE) under the checkpoint's talker.* names; this class owns the
// tables and heads around them. Codebook 0 is the caller's to sample (it gets logits and hands
// back codes); codebooks 1..G-1 are drawn here, on the device, by predict_frames().
//
// The stacks, the output heads and the predictor's input tables live on the Talker's device (a
// CUDA device: bfloat16, as DecoderLm), and so do the text embedding and projection
// (project_text computes there and returns host float32 rows); the codec and predictor embeddings
// that build the talker's input rows on the host are float32 host copies as well. On CUDA the talker's decode steps
// (prepare_decode_steps) build their rows on the device instead, from the device copies of the
// codec and predictor embeddings. One thread (the stage loop) uses
// a Talker; not thread-safe. Loading throws omni::Error(kLoadFailed / kNotFound) naming the file
// and the tensor, kUnavailable for a device that is not visible.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/causal_lm.h"
#include "model/decoder_lm.h"
#include "model/qwen3_tts/config.h"
#include "tensor/device_graph.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace omni::model::qwen3_tts {

class Talker {
 public:
  // `random_weights`: every tensor random (Checkpoint::random, load_format dummy), the folder
  // needs only config.json. `dtype`: the stacks' dtype (model/model_dtype.h; nullopt: auto, which
  // on CUDA is bfloat16 for a float32 checkpoint); the host copies stay float32.
  Talker(const std::filesystem::path& dir, TalkerConfig config, tensor::Device device = tensor::Device::cpu(),
         bool random_weights = false, std::optional<tensor::DType> dtype = std::nullopt);

  const TalkerConfig& config() const { return config_; }
  int hidden_size() const { return config_.talker.hidden_size; }
  int codec_vocab_size() const { return config_.talker.vocab_size; }
  int codebook_size() const { return config_.code_predictor.vocab_size; }
  int num_code_groups() const { return config_.num_code_groups; }
  tensor::Device device() const { return talker_.device(); }
  // The talker stack, for sizing its KV cache against device memory.
  const DecoderLm& talker_stack() const { return talker_; }

  // --- input rows (each [H] float32, H = hidden_size()) ---
  // The text track of text token ids: text_projection(text_embedding[ids]) -> [ids.size(), H] host
  // float32, computed on the Talker's device (one call for many prompts shares the products).
  // kInvalidArgument for an id outside the text vocabulary.
  tensor::Tensor project_text(std::span<const int32_t> ids) const;
  // The text or hidden projection of caller-given rows [n, text_hidden_size] (host float32) ->
  // [n, H] host float32 (the Qwen3-Omni talker's thinker rows). kInvalidArgument for a width that
  // is not text_hidden_size, or kHidden on a checkpoint without hidden_projection.
  enum class Projection { kText, kHidden };
  tensor::Tensor project_rows(const tensor::Tensor& rows, Projection projection) const;
  // Adds codec_embedding[id] to `row` (H floats); kInvalidArgument outside the codec vocabulary.
  void add_codec_embedding(int32_t id, float* row) const;
  // Adds the embedding of a whole frame to `row`: codec_embedding[codes[0]] +
  // sum_g predictor codec_embedding[g-1][codes[g]] (codes: num_code_groups() codes).
  void add_frame_embedding(std::span<const int32_t> codes, float* row) const;

  // --- talker stack ---
  size_t kv_bytes_per_block() const { return talker_.kv_bytes_per_block(); }
  // Drops the decode steps (their recordings hold the old cache's addresses).
  void init_kv_cache(int num_blocks);
  // Runs the talker on `inputs_embeds` [positions, H] (host float32; batch.token_ids empty) and
  // returns, for each slice that wants logits, the codec logits of its last row ([rows,
  // codec_vocab_size()] float32 into `logits`, copied back from the device) and its post-norm
  // hidden state ([rows, H] into `hidden` on the device, the code predictor's input).
  void forward(const ForwardBatch& batch, const tensor::Tensor& inputs_embeds, std::vector<float>& logits,
               tensor::Tensor& hidden);

  // One talker step in which every slice of `batch` (query_len 1, wants_logits; batch.token_ids
  // empty) is a decode row fed back the previous frame of its request: row i's input is text[i]
  // (hidden_size() host floats, the text track) + the frame embedding of frames[i * G, (i + 1) * G)
  // (add_frame_embedding; G = num_code_groups()). slots[i] is the request's predictor slot
  // (distinct, < predictor_slots()), which keys its text row on the device. Logits and hidden as
  // forward(). With a decode step (prepare_decode_steps) that holds the batch, the rows are built on
  // the device and the step is one upload of integers (and of the text rows that changed since the
  // slot's last step), a replay (or the same ops queued eagerly) and one copy of the logits back;
  // otherwise the rows are built on the host in float32 and go through forward(). On the decode-step
  // path `hidden` is a view of the step's buffer, valid until the next forward_frames. The codes
  // come from the host (the caller has them: they went out with the frame), as part of the step's
  // one upload. kInvalidArgument for mismatched sizes, a slot out of range or a code outside its
  // vocabulary.
  void forward_frames(const ForwardBatch& batch, std::span<const int32_t> slots, std::span<const int32_t> frames,
                      std::span<const float* const> text, std::vector<float>& logits, tensor::Tensor& hidden);

  // Prepares fixed-size talker decode steps for `batch_sizes` (positive, ascending; after
  // init_kv_cache and init_predictor_cache) for sequences of up to `max_blocks_per_seq` KV blocks:
  // per size, device buffers for every per-step input (one upload of the codes of the previous
  // frames, the text slots, positions, KV slots, context lengths and block tables, padding rows as in
  // model/decode_step_inputs.h) and, with `capture_graphs`, one DeviceGraph recording the step: the
  // input rows gathered and summed on the device (codec_embedding[code0] + the predictor embeddings
  // of codes 1..G-1, summed pairwise, + the slot's text row, each sum rounded to the stacks' dtype),
  // the stack (DecoderLm::decode_embeds) and the codec head. forward_frames then pads a batch to the
  // smallest size that holds it and replays (or queues the same ops eagerly), so codes with and
  // without graphs are identical; they may differ from forward()'s (host float32 sums rounded once,
  // prefill attention) by bfloat16 rounding. Returns false, keeping the host path, off CUDA or where
  // the talker has no decode attention kernel. kInvalidArgument for bad sizes.
  bool prepare_decode_steps(const std::vector<int>& batch_sizes, int max_blocks_per_seq, bool capture_graphs);
  void clear_decode_steps() { decode_steps_.clear(); }
  bool has_decode_steps() const { return !decode_steps_.empty(); }

  // --- code predictor ---
  // Sizes the predictor's KV cache for `num_slots` frames in flight (one per running request). Drops
  // the frame and decode steps.
  void init_predictor_cache(int num_slots);
  int predictor_slots() const { return predictor_slots_; }
  // The code predictor for one frame of each slot in `slots` (distinct, < predictor_slots()), all
  // in one batch per codebook: `hidden` [slots.size(), H] holds the talker's post-norm hidden
  // states (on the device, as forward() returns them), `code0s` the sampled codebook-0 codes.
  // Codebook g (1..G-1) of row i is drawn by tensor::ops::sample with params[i] at step
  // params[i].step + g - 1. The G-1 sub-steps only queue work on the device (no synchronisation);
  // `codes` receives [slots.size(), G-1] row-major in one copy at the end. kInvalidArgument for
  // mismatched sizes or a code0 outside the codec vocabulary.
  void predict_frames(std::span<const int32_t> slots, const tensor::Tensor& hidden, std::span<const int32_t> code0s,
                      std::span<const tensor::ops::SamplingParams> params, std::vector<int32_t>& codes);

  // Prepares fixed-size frame steps for `batch_sizes` (positive, ascending; after
  // init_predictor_cache): per size, device buffers for every per-frame input (one upload of codes,
  // positions, KV slots and tables, one of the packed sampling parameters) and, with
  // `capture_graphs`, one DeviceGraph recording all G-1 sub-steps: the predictor's decode steps
  // (DecoderLm::decode_embeds; G-1 passes: the frame's two prefill rows go through the stack
  // together as two decode rows per slot, the second attending to the first, whose KV each layer
  // stores before its attention reads it; then one row per slot per codebook), its heads,
  // ops::sample_packed and the gathers of the next inputs. predict_frames then pads a batch to the
  // smallest size that holds it and replays (or queues the same ops eagerly), so codes with and
  // without graphs are identical; they may differ from the ordinary path's by bfloat16 rounding
  // (decode attention for the prefill rows, other matrix shapes). Returns false, keeping the ordinary
  // path, off CUDA or where the predictor has no decode attention kernel. kInvalidArgument for bad
  // sizes.
  bool prepare_frame_steps(const std::vector<int>& batch_sizes, bool capture_graphs);
  // Drops the frame steps (predict_frames takes the ordinary path again).
  void clear_frame_steps() { frame_steps_.clear(); }
  bool has_frame_steps() const { return !frame_steps_.empty(); }

  // The predictor one step at a time with host inputs and logits (the reference comparisons):
  // step 0 of a frame for each slot in `slots` (distinct, < predictor_slots()): prefill
  // [proj(hidden[i]), proj(codec_embedding[code0s[i]])] from scratch (the slot's previous frame is
  // discarded) and return the logits of codebook 1 ([slots.size(), codebook_size()]). `hidden` is
  // [slots.size(), H], the talker's post-norm hidden state that produced each code0: host float32,
  // or where forward() left it (on the device, in the stacks' dtype).
  void predictor_prefill(std::span<const int32_t> slots, const tensor::Tensor& hidden, std::span<const int32_t> code0s,
                         std::vector<float>& logits);
  // Step `group` (2..num_code_groups()-1): feeds codebook group-1's codes and returns the logits of
  // codebook `group`.
  void predictor_step(int group, std::span<const int32_t> slots, std::span<const int32_t> prev_codes,
                      std::vector<float>& logits);

 private:
  // Runs the predictor stack on `rows` [n, H] (talker width, on the device; projected here and
  // consumed) and returns the logits [slots, codebook] of head `head` for each slot's last row, on
  // the device.
  tensor::Tensor run_predictor(const ForwardBatch& batch, const tensor::Tensor& rows, int head);
  // A host float32 tensor on the device in the stacks' dtype (itself on the CPU).
  tensor::Tensor on_device(const tensor::Tensor& host) const;
  // One projection (text_projection or hidden_projection): fc1 with its constant-one half
  // ([2 * inner, text_hidden]), fc2 [H, inner], on the device.
  struct ProjectionWeights {
    tensor::Tensor fc1_w, fc1_b, fc2_w, fc2_b;
  };
  ProjectionWeights load_projection(const Checkpoint& ckpt, const std::string& name) const;
  // rows [n, text_hidden] on the device in the stacks' dtype -> host float32 [n, H].
  tensor::Tensor project(const tensor::Tensor& rows, const ProjectionWeights& p) const;
  // Device logits [rows, n] to host float32.
  static void logits_to_host(const tensor::Tensor& device_logits, std::vector<float>& logits);

  // One batch size of the fixed-size frame path (prepare_frame_steps).
  struct FrameStep {
    int64_t rows = 0;
    // i32: [code0s: rows][positions: G x rows][KV slots: G x rows][context lengths: G x rows]
    // [block tables: 2 x rows x blocks per slot], padding rows as in model/decode_step_inputs.h.
    // Positions 0 and 1 are one pass of 2 x rows rows (their entries are adjacent), which reads both
    // copies of the tables; later passes read the first.
    tensor::Tensor inputs;
    tensor::Tensor params;  // i32 [rows, ops::kPackedSamplingParamsWords]
    // [2 x rows, H]: the first pass's input rows, the talker's hidden states (written per frame)
    // then the codebook-0 embeddings (gathered in the step).
    tensor::Tensor hidden;
    tensor::Tensor drawn;  // i32 [G-1, rows]: codebook g's codes in row g-1
    tensor::DeviceGraph graph;
  };
  // Queues the G-1 sub-steps of `step`, reading its inputs and writing step.drawn.
  void queue_frame_step(FrameStep& step);
  // The frame inputs of `slots` / `code0s` padded to step.rows, into `out`.
  void pack_frame_inputs(std::span<const int32_t> slots, std::span<const int32_t> code0s, int64_t rows,
                         std::span<int32_t> out) const;
  // The smallest frame step that holds `n` rows and can draw with `params`, or nullptr.
  FrameStep* frame_step_for(int64_t n, std::span<const tensor::ops::SamplingParams> params);

  // One batch size of the fixed-size talker decode path (prepare_decode_steps).
  struct DecodeStep {
    int64_t rows = 0;
    // i32: the decode step inputs of model/decode_step_inputs.h with code0 as the token ids, then
    // [codes of codebooks 1..G-1: (G-1) x rows][text slots: rows].
    tensor::Tensor inputs;
    tensor::Tensor hidden;  // [rows, H]: the input rows, then the post-norm hidden states
    tensor::Tensor logits;  // [rows, codec_vocab]
    tensor::DeviceGraph graph;
  };
  // Queues the ops of `step`, reading its inputs and slot_text_, writing step.hidden and step.logits.
  void queue_decode_step(DecodeStep& step);
  // The smallest decode step that runs `batch`, or nullptr.
  DecodeStep* decode_step_for(const ForwardBatch& batch);
  // Packs `batch`'s integers into decode_staging_ for `step` and uploads them, with the text rows of
  // the slots whose text changed.
  void upload_decode_inputs(const ForwardBatch& batch, std::span<const int32_t> slots, std::span<const int32_t> frames,
                            std::span<const float* const> text, DecodeStep& step);
  // The host path of forward_frames: rows summed in float32, then forward().
  void forward_frames_on_host(const ForwardBatch& batch, std::span<const int32_t> frames,
                              std::span<const float* const> text, std::vector<float>& logits, tensor::Tensor& hidden);

  TalkerConfig config_;
  DecoderLm talker_;
  DecoderLm predictor_;
  // On the device: the text embedding (undefined without text_vocab_size) and the projections.
  tensor::Tensor text_embedding_;  // [text_vocab, text_hidden]
  ProjectionWeights text_projection_, hidden_projection_;
  // Host float32: the input rows of the talker are built on the host.
  tensor::Tensor codec_embedding_;                    // [codec_vocab, H]
  std::vector<tensor::Tensor> predictor_embeddings_;  // num_code_groups-1 x [codebook, H]
  // On the device.
  tensor::Tensor codec_head_;  // [codec_vocab, H]
  // codec_embedding_ with one zero row appended [codec_vocab + 1, H]: predict_frames gathers the
  // code0 rows of its prefill from it, and the zero row where a hidden state goes.
  tensor::Tensor padded_codec_embedding_;
  tensor::Tensor mtp_projection_w_, mtp_projection_b_;       // undefined when the widths are equal (0.6B)
  std::vector<tensor::Tensor> device_predictor_embeddings_;  // num_code_groups-1 x [codebook, H]
  std::vector<tensor::Tensor> predictor_heads_;              // num_code_groups-1 x [codebook, H_cp]
  int predictor_slots_ = 0;
  int predictor_blocks_per_slot_ = 1;
  std::vector<FrameStep> frame_steps_;
  tensor::Tensor frame_staging_;          // host i32, the largest step's inputs
  std::vector<DecodeStep> decode_steps_;  // ascending rows; empty: the host path
  int decode_table_width_ = 0;
  int talker_blocks_ = 0;          // of the talker's KV cache
  tensor::Tensor decode_staging_;  // host i32, the largest decode step's inputs
  // The text row each predictor slot's decode rows add, on the device [slots, H] in the stacks'
  // dtype, and its host copies: float32 (to see whether a step's text changed) and in that dtype
  // (what the upload sends). slot_text_set_[s]: slot s's row has been uploaded.
  tensor::Tensor slot_text_, slot_text_f32_, slot_text_staged_;
  std::vector<bool> slot_text_set_;
};

}  // namespace omni::model::qwen3_tts
