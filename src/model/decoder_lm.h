// The pre-norm decoder-only transformer LM of the Qwen families (Qwen2, Qwen3 and the text
// stacks built like them), on the tensor ops: embedding -> N x [RMSNorm, GQA attention with NeoX
// RoPE over the paged KV cache, residual, RMSNorm, SwiGLU MLP, residual] -> RMSNorm -> lm_head.
// What differs between families is a DecoderVariant, not a copy of this code.
//
// On the CPU, weights, activations and the KV cache are float32 (bf16/f16 on disk are widened). On a
// CUDA device they are bfloat16 (float32 on disk is rounded once at load), with float32 arithmetic
// inside every op; a step uploads its token ids, positions and KV slots in one copy, runs every op
// on the device's stream without waiting, and copies back only the logits rows asked for (or, in
// forward_greedy, one token id per row). Activations come from the device's caching allocator, so a
// step allocates no new device memory once the shapes have been seen. The KV cache is
// [num_blocks, kKvBlockSize, kv_heads, head_dim] per layer in the activation dtype.
// Threading per CausalLm.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "model/causal_lm.h"
#include "model/hf_config.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace omni::model {

class Checkpoint;

struct DecoderVariant {
  bool qk_norm = false;   // Qwen3: RMSNorm over each head of q and k before RoPE
  bool qkv_bias = false;  // Qwen2: q/k/v projections have a bias
};

class DecoderLm : public CausalLm {
 public:
  // Loads the weights of `dir` under Hugging Face names (model.layers.{i}.self_attn.q_proj.weight…;
  // lm_head.weight, or the embedding when tied). Throws kLoadFailed naming a missing or
  // mis-shaped tensor, kUnsupported for an activation other than silu.
  // `device` is where the model runs (kUnavailable when it is not a visible device).
  DecoderLm(const std::filesystem::path& dir, const TextModelConfig& config, DecoderVariant variant,
            tensor::Device device = tensor::Device::cpu());

  const CausalLmInfo& info() const override { return info_; }
  size_t kv_bytes_per_block() const override;
  void init_kv_cache(int num_blocks) override;
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;
  void forward_greedy(const ForwardBatch& batch, std::vector<int32_t>& token_ids) override;
  tensor::Device device() const override { return device_; }
  size_t activation_bytes(int max_tokens, int max_logit_rows) const override;

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

  void check_batch(const ForwardBatch& batch) const;
  // Runs the layers over the batch and returns the logits [rows, vocab] (on the model's device, in
  // its dtype) of the rows the batch asks for.
  tensor::Tensor run(const ForwardBatch& batch);
  // A weight of the checkpoint on the model's device in its dtype.
  tensor::Tensor load_weight(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape) const;

  TextModelConfig config_;
  DecoderVariant variant_;
  tensor::Device device_;
  tensor::DType dtype_;  // of weights, activations and the KV cache
  CausalLmInfo info_;
  tensor::ops::RopeSpec rope_;
  tensor::Tensor embed_tokens_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  int num_blocks_ = 0;
};

}  // namespace omni::model
