// The pre-norm decoder-only transformer LM of the Qwen families (Qwen2, Qwen3 and the text
// stacks built like them), on the tensor ops: embedding -> N x [RMSNorm, GQA attention with NeoX
// RoPE over the paged KV cache, residual, RMSNorm, SwiGLU MLP, residual] -> RMSNorm -> lm_head.
// What differs between families is a DecoderVariant, not a copy of this code.
//
// Weights are loaded once as float32 CPU tensors (bf16/f16 on disk are widened); the KV cache is
// float32 [num_blocks, kKvBlockSize, kv_heads, head_dim] per layer. Threading per CausalLm.
//
// Tensor parallelism: given a communicator of size N, the object is rank r's shard
// (model/tensor_parallel.h): it loads only its slices, holds the KV cache of its KV heads, and
// meets the other ranks in two all-reduces per layer, one for the embedding and one all-gather
// of the logits. Every rank must call init_kv_cache and forward with the same arguments in the
// same order (model/tensor_parallel_lm.h does that); every rank returns the full logits.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "model/causal_lm.h"
#include "model/hf_config.h"
#include "model/tensor_parallel.h"
#include "tensor/communicator.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace omni::model {

struct DecoderVariant {
  bool qk_norm = false;   // Qwen3: RMSNorm over each head of q and k before RoPE
  bool qkv_bias = false;  // Qwen2: q/k/v projections have a bias
};

// Where a decoder's weights live, for stacks nested inside a larger checkpoint (the Qwen3-TTS
// talker under "talker.model.", its code predictor under "talker.code_predictor.model.").
struct DecoderWeights {
  std::string prefix = "model.";  // {prefix}layers.{i}.*, {prefix}norm.weight, {prefix}embed_tokens.weight
  // false: a stack fed through forward_embeds whose caller owns the input tables and output heads;
  // neither embed_tokens nor lm_head is loaded and forward() is refused.
  bool has_embedding_and_head = true;
};

class DecoderLm : public CausalLm {
 public:
  // Loads the weights of `dir` under Hugging Face names (model.layers.{i}.self_attn.q_proj.weight…;
  // lm_head.weight, or the embedding when tied). Throws kLoadFailed naming a missing or
  // mis-shaped tensor, kUnsupported for an activation other than silu. `tensor_parallel` (not
  // owned, outlives the model; null for one rank) makes this its rank's shard; kInvalidConfig
  // when the model cannot be cut into that many ranks.
  DecoderLm(const std::filesystem::path& dir, const TextModelConfig& config, DecoderVariant variant,
            tensor::Communicator* tensor_parallel = nullptr);
  // The same stack under other weight names (see DecoderWeights).
  DecoderLm(const std::filesystem::path& dir, const TextModelConfig& config, DecoderVariant variant,
            const DecoderWeights& weights, tensor::Communicator* tensor_parallel = nullptr);

  const CausalLmInfo& info() const override { return info_; }
  size_t kv_bytes_per_block() const override;
  void init_kv_cache(int num_blocks) override;
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;
  // Runs the stack on caller-built input rows instead of token ids: `inputs_embeds` is [tokens,
  // hidden_size] float32, one row per batch position (batch.token_ids must be empty; every rank
  // passes the same full rows). Writes the post-final-norm hidden states of the rows forward()
  // would give logits for into `hidden` (replaced by a new [rows, hidden_size] tensor). Errors as
  // forward().
  void forward_embeds(const ForwardBatch& batch, const tensor::Tensor& inputs_embeds, tensor::Tensor& hidden);

  const TextModelConfig& config() const { return config_; }

 private:
  struct Layer {
    tensor::Tensor input_norm, post_attention_norm;
    tensor::Tensor q_proj, k_proj, v_proj, o_proj;
    tensor::Tensor q_bias, k_bias, v_bias;  // undefined without qkv_bias
    tensor::Tensor q_norm, k_norm;          // undefined without qk_norm
    tensor::Tensor gate_up_proj;            // [2 * intermediate, hidden]: gate rows, then up rows
    tensor::Tensor down_proj;
    tensor::Tensor k_cache, v_cache;
  };

  void check_batch(const ForwardBatch& batch, size_t tokens) const;
  // forward() and forward_embeds(): embeds null = look up batch.token_ids; logits and/or hidden out.
  void run(const ForwardBatch& batch, const tensor::Tensor* inputs_embeds, std::vector<float>* logits,
           tensor::Tensor* hidden);
  // Sums a row-parallel product's partial results over the ranks.
  void reduce_partial_sums(tensor::Tensor& x);
  // The logits of `picked` [rows, hidden] over the whole vocabulary into `out` [rows, vocab].
  void project_vocabulary(const tensor::Tensor& picked, tensor::Tensor& out);

  TextModelConfig config_;
  DecoderVariant variant_;
  bool has_embedding_and_head_ = true;
  CausalLmInfo info_;
  tensor::ops::RopeSpec rope_;
  tensor::Communicator* tensor_parallel_ = nullptr;
  DecoderShard shard_;
  // embed_tokens_ holds the shard's vocab_rows rows plus one zero row that every token outside
  // the shard's range reads; lm_head_ is [vocab_rows, hidden].
  tensor::Tensor embed_tokens_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  int num_blocks_ = 0;
};

}  // namespace omni::model
