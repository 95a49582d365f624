// The mixture-of-experts MLP of a decoder layer (Qwen3-MoE, the Qwen3-Omni thinker): a router
// `gate.weight` [E, H] scores each token's experts, softmax in float32, the top k experts are kept
// (their probabilities renormalised to sum to 1 when norm_topk_prob), and the token's output is the
// sum of the kept experts' SwiGLU outputs (down(silu(gate(x)) * up(x)), no biases) weighted by those
// probabilities, rounded to the activation dtype as Hugging Face does. With a shared expert
// (MoeConfig::shared_expert_intermediate_size, the Qwen3-Omni talker's Qwen2-MoE block), every token
// also runs `shared_expert.{gate,up,down}_proj`, a SwiGLU of that width, whose output is added
// times sigmoid(`shared_expert_gate.weight` [1, H] . x).
//
// Weights come in either layout a checkpoint may use: one tensor per expert and projection
// (`experts.{e}.{gate,up,down}_proj.weight`, as released checkpoints store them) or the fused
// tensors of transformers 5 (`experts.gate_up_proj` [E, 2I, H]: expert e's gate rows, then its up
// rows; `experts.down_proj` [E, H, I]). Both become the same [E * 2I, H] and [E * H, I] matrices.
//
// On the CPU the routing decision is made on the host: the tokens are grouped by expert and each
// active expert runs as two products over its tokens' rows. On CUDA everything stays on the device
// (tensor/moe_ops.h): the router's top-k, the grouping by expert, one grouped product for gate/up
// and one for down over the active experts only (a few-row kernel that reads each selected
// expert's weights once for decode, tensor-core tiles for long prefills), SiLU-and-multiply and the
// weighted sum back into token order. Nothing is read back, so the layer can be recorded into a
// CUDA graph; shapes the grouped products cannot take (the expert's K not a multiple of 16 bytes)
// fall back to the host router, and then runs_on_device() is false.
#pragma once

#include <string>

#include "model/hf_config.h"
#include "tensor/tensor.h"

namespace omni::model {

class Checkpoint;

class MoeMlp {
 public:
  // Loads `{prefix}gate.weight` and the experts under `{prefix}experts.` in whichever layout the
  // checkpoint has (kLoadFailed naming the router's missing or mis-shaped tensor, or the first
  // expert tensor of the per-expert layout when neither layout is complete).
  MoeMlp(const Checkpoint& ckpt, const std::string& prefix, const MoeConfig& moe, int64_t hidden, tensor::DType dtype,
         tensor::Device device);

  // out [T, H] = the layer's MLP output for x [T, H] (normalised input), both on the model's device
  // in its dtype.
  void forward(const tensor::Tensor& x, tensor::Tensor& out) const;

  // The router's choice for one token's logits: the experts in descending order of probability
  // (ties: lower index first) and their weights (renormalised when norm_topk_prob). Exposed for
  // tests.
  static void route(const float* logits, int num_experts, int top_k, bool norm_topk_prob, int32_t* experts,
                    float* weights);

  // Activation bytes forward() holds at once for `tokens` rows, for sizing.
  size_t activation_bytes(int64_t tokens) const;

  // Whether forward() runs without a host synchronisation (CUDA with shapes the grouped products
  // take): what lets a decoder record MoE layers into its decode steps.
  bool runs_on_device() const { return on_device_; }

 private:
  void load_per_expert(const Checkpoint& ckpt, const std::string& prefix);
  void forward_on_host(const tensor::Tensor& x, tensor::Tensor& out) const;
  void forward_on_device(const tensor::Tensor& x, tensor::Tensor& out) const;
  // out += sigmoid(shared gate . x) * shared SwiGLU(x), on the model's device.
  void add_shared_expert(const tensor::Tensor& x, tensor::Tensor& out) const;

  MoeConfig moe_;
  bool on_device_ = false;
  int64_t hidden_ = 0;
  tensor::DType dtype_;
  tensor::Device device_;
  tensor::Tensor router_;   // [E, H]
  tensor::Tensor gate_up_;  // [E * 2I, H]: expert e's gate rows, then its up rows
  tensor::Tensor down_;     // [E * H, I]
  tensor::Tensor shared_gate_up_, shared_down_, shared_gate_;  // [2 I_s, H], [H, I_s], [1, H]; or undefined
};

}  // namespace omni::model
