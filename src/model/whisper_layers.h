// The Transformer layers of a Whisper-style audio encoder, as the Qwen Omni audio towers use them:
// pre-LayerNorm self-attention (q/v/out with bias; k with or without) and a GELU MLP, each added to
// the residual stream. Attention stays inside windows of consecutive rows (each chunk or window of
// an audio attends only to itself), so one call runs every audio of a batch.
// The weights are immutable after loading; run() may be called from several threads.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/placement.h"
#include "tensor/tensor.h"

namespace omni::model {

class Checkpoint;

class WhisperLayers {
 public:
  struct Shape {
    int64_t d_model = 0;
    int64_t ffn_dim = 0;
    int64_t heads = 0;
    int num_layers = 0;
    bool k_bias = true;  // whether self_attn.k_proj has a bias (Whisper's has none)
  };

  // Loads `prefix`layers.{i}.{self_attn_layer_norm, self_attn.{q,k,v,out}_proj, final_layer_norm,
  // fc1, fc2} onto `placement`; throws what Checkpoint::load throws (kLoadFailed naming the tensor).
  WhisperLayers(const Checkpoint& ckpt, const std::string& prefix, const Shape& shape, const Placement& placement);

  // Runs every layer over h [rows, d_model] (on the placement) in place; `windows` are the lengths
  // of consecutive row ranges that attend within themselves (they sum to rows).
  void run(tensor::Tensor& h, std::span<const int64_t> windows) const;

 private:
  struct Layer {
    tensor::Tensor attn_norm_w, attn_norm_b, q_w, q_b, k_w, k_b, v_w, v_b, out_w, out_b;
    tensor::Tensor mlp_norm_w, mlp_norm_b, fc1_w, fc1_b, fc2_w, fc2_b;
  };
  Shape shape_;
  Placement placement_;
  std::vector<Layer> layers_;
};

}  // namespace omni::model
