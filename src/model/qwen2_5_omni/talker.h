// The Qwen2.5-Omni talker model (transformers' Qwen2_5OmniTalkerForConditionalGeneration): a Qwen2
// decoder (q/k/v biases, sectioned M-RoPE) under `talker.model.` whose inputs are rows in the
// thinker's width (talker_config.embedding_size) projected by `talker.thinker_to_talker_proj`
// (Linear with bias) to its own width, and whose output head `talker.codec_head` scores the codec
// vocabulary. Its codec embeddings (`talker.model.embed_tokens`) are in the thinker's width too, so
// a row is built there and projected once (talker_prompt.h).
//
// On the CPU float32; on CUDA the stack, the projection and the head are in the load dtype, the
// codec embeddings stay on the host in float32. Threads: one caller, as every CausalLm.
#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/json.h"
#include "model/decoder_lm.h"
#include "model/hf_config.h"
#include "tensor/tensor.h"

namespace omni::model::qwen2_5_omni {

// talker_config of a Qwen2.5-Omni config.json: the decoder's fields and the codec and text ids its
// prompt is made of (transformers' class defaults, the released values, where absent).
struct TalkerConfig {
  TextModelConfig text;       // the decoder (its vocab_size is the codec vocabulary)
  int embedding_size = 0;     // the thinker's width: codec embeddings and input rows
  int32_t codec_bos = 8293;   // tts_codec_start_token_id
  int32_t codec_eos = 8294;   // tts_codec_end_token_id
  int32_t codec_pad = 8292;   // tts_codec_pad_token_id
  int32_t codec_mask = 8296;  // tts_codec_mask_token_id
  int32_t text_bos = 151860;  // tts_text_start_token_id
  int32_t text_eos = 151861;  // tts_text_end_token_id
  int32_t text_pad = 151859;  // tts_text_pad_token_id
};

// kLoadFailed naming `source` and the field (talker_config missing, a shape field absent, an id
// outside the codec vocabulary).
TalkerConfig parse_talker_config(const Json& config, const std::string& source);

class Talker {
 public:
  // The talker of `dir` on `device` in `dtype` (nullopt: the checkpoint's, bfloat16 on CUDA for
  // float32 ones); random_weights: Checkpoint::random. Errors as DecoderLm's, kLoadFailed naming a
  // missing or mis-shaped tensor.
  Talker(const std::filesystem::path& dir, const TalkerConfig& config, tensor::Device device,
         bool random_weights = false, std::optional<tensor::DType> dtype = std::nullopt);

  const TalkerConfig& config() const { return config_; }
  DecoderLm& stack() { return *stack_; }
  const DecoderLm& stack() const { return *stack_; }

  // Adds the codec embedding of `id` to `row` (embedding_size floats). kInvalidArgument for an id
  // outside the codec vocabulary.
  void add_codec_embedding(int32_t id, float* row) const;
  // Runs `batch` (its slices' rows are `rows`, host float32 [tokens, embedding_size], in thinker
  // width) and returns the codec logits of the rows that want them, [rows, vocab] host float32.
  void forward(const ForwardBatch& batch, const tensor::Tensor& rows, std::vector<float>& logits);

 private:
  TalkerConfig config_;
  std::unique_ptr<DecoderLm> stack_;
  tensor::Tensor codec_embeddings_;  // host f32 [vocab, embedding_size]
  tensor::Tensor proj_w_, proj_b_, codec_head_;
};

}  // namespace omni::model::qwen2_5_omni
