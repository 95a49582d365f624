// The Qwen3-TTS talker as computation (reference qwen-models.md §4.3–4.5): the talker stack that
// predicts codebook 0 from caller-built input rows, and the code predictor (MTP) that predicts
// codebooks 1..G-1 of each frame with its own small KV cache. Both stacks are DecoderLm (the
// Qwen3 layer, q/k norm, NeoX RoPE) under the checkpoint's talker.* names; this class owns the
// tables and heads around them. Sampling is the caller's: it gets logits and hands back codes.
//
// Weights are float32 CPU tensors. One thread (the stage loop) uses a Talker; not thread-safe.
// Loading throws omni::Error(kLoadFailed / kNotFound) naming the file and the tensor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "model/causal_lm.h"
#include "model/decoder_lm.h"
#include "model/qwen3_tts/config.h"
#include "tensor/tensor.h"

namespace omni::model::qwen3_tts {

class Talker {
 public:
  Talker(const std::filesystem::path& dir, TalkerConfig config);

  const TalkerConfig& config() const { return config_; }
  int hidden_size() const { return config_.talker.hidden_size; }
  int codec_vocab_size() const { return config_.talker.vocab_size; }
  int codebook_size() const { return config_.code_predictor.vocab_size; }
  int num_code_groups() const { return config_.num_code_groups; }

  // --- input rows (each [H] float32, H = hidden_size()) ---
  // The text track of text token ids: text_projection(text_embedding[ids]) -> [ids.size(), H].
  // kInvalidArgument for an id outside the text vocabulary.
  tensor::Tensor project_text(std::span<const int32_t> ids) const;
  // Adds codec_embedding[id] to `row` (H floats); kInvalidArgument outside the codec vocabulary.
  void add_codec_embedding(int32_t id, float* row) const;
  // Adds the embedding of a whole frame to `row`: codec_embedding[codes[0]] +
  // sum_g predictor codec_embedding[g-1][codes[g]] (codes: num_code_groups() codes).
  void add_frame_embedding(std::span<const int32_t> codes, float* row) const;

  // --- talker stack ---
  size_t kv_bytes_per_block() const { return talker_.kv_bytes_per_block(); }
  void init_kv_cache(int num_blocks) { talker_.init_kv_cache(num_blocks); }
  // Runs the talker on `inputs_embeds` [positions, H] (batch.token_ids empty) and returns, for each
  // slice that wants logits, the codec logits of its last row ([rows, codec_vocab_size()] into
  // `logits`) and its post-norm hidden state ([rows, H] into `hidden`, the code predictor's input).
  void forward(const ForwardBatch& batch, const tensor::Tensor& inputs_embeds, std::vector<float>& logits,
               tensor::Tensor& hidden);

  // --- code predictor ---
  // Sizes the predictor's KV cache for `num_slots` frames in flight (one per running request).
  void init_predictor_cache(int num_slots);
  int predictor_slots() const { return predictor_slots_; }
  // Step 0 of a frame for each slot in `slots` (distinct, < predictor_slots()): prefill
  // [proj(hidden[i]), proj(codec_embedding[code0s[i]])] from scratch (the slot's previous frame is
  // discarded) and return the logits of codebook 1 ([slots.size(), codebook_size()]). `hidden` is
  // [slots.size(), H], the talker's post-norm hidden state that produced each code0.
  void predictor_prefill(std::span<const int32_t> slots, const tensor::Tensor& hidden, std::span<const int32_t> code0s,
                         std::vector<float>& logits);
  // Step `group` (2..num_code_groups()-1): feeds codebook group-1's codes and returns the logits of
  // codebook `group`.
  void predictor_step(int group, std::span<const int32_t> slots, std::span<const int32_t> prev_codes,
                      std::vector<float>& logits);

 private:
  // Runs the predictor stack on `rows` [n, H] (talker width; projected here) and writes the logits
  // of head `head` for each slot's last row.
  void run_predictor(const ForwardBatch& batch, const tensor::Tensor& rows, int head, std::vector<float>& logits);

  TalkerConfig config_;
  DecoderLm talker_;
  DecoderLm predictor_;
  tensor::Tensor codec_embedding_;  // [codec_vocab, H]
  tensor::Tensor codec_head_;       // [codec_vocab, H]
  tensor::Tensor text_embedding_;   // [text_vocab, text_hidden]
  tensor::Tensor text_fc1_w_, text_fc1_b_, text_fc2_w_, text_fc2_b_;
  tensor::Tensor mtp_projection_w_, mtp_projection_b_;  // undefined when the widths are equal (0.6B)
  std::vector<tensor::Tensor> predictor_embeddings_;    // num_code_groups-1 x [codebook, H]
  std::vector<tensor::Tensor> predictor_heads_;         // num_code_groups-1 x [codebook, H_cp]
  int predictor_slots_ = 0;
  int predictor_blocks_per_slot_ = 1;
};

}  // namespace omni::model::qwen3_tts
