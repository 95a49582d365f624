// Z-Image's S3-DiT (diffusers' ZImageTransformer2DModel) for one image at a time, on the CPU in
// float32 or on a CUDA device in its placement's dtype: the latents are cut into 2x2 patches and embedded, refined by
// the noise refiner blocks (modulated by the timestep), the caption features are embedded and refined by the context
// refiner blocks (unmodulated), and the single stream [image tokens, caption tokens] runs through the joint blocks and
// the final layer; the image tokens are put back into a latent-shaped velocity. Each stream is padded to a multiple of
// 32 tokens with a learned pad token; RoPE rotates over three axes (caption index, row, column). docs/models/z_image.md
// gives the details.
//
// A batch of images is the same computation per image (diffusers batches them with an attention
// mask, which makes each image see only its own tokens), so forward() takes one. The latents, the
// caption features and the output are host float32 tensors (the pipeline's own arithmetic is
// float32); the patches and the caption go up once per forward(), the rotation tables (float32 on
// every device) once per stream shape (kept for later steps and images), and the output patches
// come back, so a step synchronises the device once. On CUDA each block's elementwise steps are
// the fused kernels of tensor/dit_ops.h and its q/k/v one product. The weights are immutable after
// construction (the rotation cache is guarded by a mutex); forward() may be called from one thread
// at a time.
#pragma once

#include <array>
#include <filesystem>
#include <map>
#include <mutex>
#include <vector>

#include "model/z_image/config.h"
#include "model/placement.h"
#include "tensor/tensor.h"

namespace omni::model {
class Checkpoint;
}

namespace omni::model::z_image {

// Tokens of a stream are padded to a multiple of this.
inline constexpr int kSequenceMultiple = 32;

class Transformer {
 public:
  // Loads `dir`/transformer (diffusion_pytorch_model.safetensors, sharded or not). Throws
  // omni::Error(kLoadFailed) naming a missing or mis-shaped tensor.
  // The weights go to `placement` (converted from the checkpoint's dtype where it differs).
  Transformer(const std::filesystem::path& dir, const TransformerConfig& config, const Placement& placement = {});

  // latents [C, H, W] (H and W multiples of the patch size), t the model's time in [0, 1] (0 at
  // the first step: (1000 - timestep) / 1000), caption [L, cap_feat_dim] (L >= 1). Returns the
  // model output [C, H, W] (the pipeline negates it into the velocity). kInvalidArgument when a
  // position falls outside the RoPE tables (axes_lens) or a shape is wrong.
  tensor::Tensor forward(const tensor::Tensor& latents, float t, const tensor::Tensor& caption) const;

  const TransformerConfig& config() const { return config_; }

 private:
  struct Block {
    tensor::Tensor qkv;  // [3 * dim, dim]: to_q, to_k, to_v rows (one product for the three)
    tensor::Tensor out;  // to_out.0 [dim, dim]
    tensor::Tensor norm_q, norm_k;
    tensor::Tensor attention_norm1, attention_norm2, ffn_norm1, ffn_norm2;
    tensor::Tensor w13;  // [2 * ffn, dim]: w1 (gate) rows, then w3 (up) rows
    tensor::Tensor w2;
    tensor::Tensor modulation_w, modulation_b;  // adaLN_modulation.0 [4 * dim, adaln]; undefined unmodulated
  };
  // The cos and sin of each token's rotation angles, [tokens, head_dim / 2] each.
  struct Rotation {
    tensor::Tensor cos, sin;
  };

  Block load_block(const Checkpoint& ckpt, const std::string& prefix, bool modulated) const;
  // One block over x [T, dim] in place; adaln [adaln_dim] (ignored for an unmodulated block).
  void run_block(const Block& b, tensor::Tensor& x, const Rotation& rot, const tensor::Tensor& adaln) const;
  // positions [T, 3] -> the rotation of every token.
  Rotation rotation(const std::vector<std::array<int32_t, 3>>& positions) const;
  // rotation(positions) for the stream of (h_tokens, w_tokens, padded caption length), which
  // determines the positions: computed once per shape (264K cosines and sines on the host, several
  // milliseconds the device would wait for at every step) and kept for the next steps and images.
  Rotation cached_rotation(const std::array<int64_t, 3>& key,
                           const std::vector<std::array<int32_t, 3>>& positions) const;
  tensor::Tensor timestep_embedding(float t) const;
  // An activation of `shape` on the placement.
  tensor::Tensor activation(tensor::Shape shape) const;
  tensor::Tensor weight(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape) const;

  TransformerConfig config_;
  Placement placement_;
  std::vector<double> axis_freqs_[3];
  tensor::Tensor t_mlp0_w_, t_mlp0_b_, t_mlp2_w_, t_mlp2_b_;
  tensor::Tensor cap_norm_, cap_w_, cap_b_;
  tensor::Tensor x_embed_w_, x_embed_b_;
  tensor::Tensor x_pad_, cap_pad_;
  tensor::Tensor final_mod_w_, final_mod_b_, final_w_, final_b_;
  tensor::Tensor ones_, zeros_;  // [dim]: the final layer's norm has no affine parameters; 1 + scale
  std::vector<Block> noise_refiner_, context_refiner_, layers_;
  // Rotation tables by stream shape (cached_rotation); cleared when it holds kCachedRotations.
  static constexpr size_t kCachedRotations = 8;
  mutable std::mutex rotation_mutex_;
  mutable std::map<std::array<int64_t, 3>, Rotation> rotations_;
};

}  // namespace omni::model::z_image
