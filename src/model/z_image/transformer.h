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
// the fused kernels of tensor/dit_ops.h and its q/k/v one product.
//
// CUDA graphs (on a CUDA placement unless set_cuda_graphs(false), vLLM's enforce_eager): everything
// after the caption embedding (the timestep MLP, the image embedding, the refiners, the joint
// blocks and the final layer, ~20 kernels a block) is recorded once per step shape, (h_tokens,
// w_tokens, padded caption length), and replayed with one launch (tensor/device_graph.h). A shape
// keeps device-resident inputs that each forward() rewrites on the stream before the replay: the
// patches, the timestep's sinusoidal features (computed on the host as in the eager path) and the
// caption rows of the stream buffer, which the few eager ops of the caption embedding (RMSNorm,
// Linear, pad rows; their arguments depend on the real caption length) write. So one recording
// serves every prompt of that padded length, the prompt and the negative prompt of CFG alike. The
// replay runs the same kernels on the same values as the eager path: outputs are bitwise equal.
// At most kCachedGraphs shapes are kept (the least recently used goes first); a recording's own
// temporaries come from the device's graph pool (tensor/cuda/allocator.h).
//
// The weights are immutable after construction (the rotation and graph caches are guarded by
// mutexes); forward() may be called from one thread at a time.
#pragma once

#include <array>
#include <filesystem>
#include <map>
#include <mutex>
#include <vector>

#include "model/placement.h"
#include "model/z_image/config.h"
#include "tensor/device_graph.h"
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

  // Whether forward() on a CUDA placement records and replays CUDA graphs (the default) or launches
  // every op itself; no effect on the CPU. Turning them off drops the recorded graphs. Not while
  // forward() runs.
  void set_cuda_graphs(bool on);
  // True when forward() takes the graph path: a CUDA placement with graphs on (a recording that
  // failed turns them off, with a warning, and the step runs eagerly).
  bool uses_cuda_graphs() const;
  // Since construction: recordings made, replays of a recording, and the shapes recorded now.
  struct GraphCounts {
    int64_t captures = 0;
    int64_t replays = 0;
    size_t cached = 0;
  };
  GraphCounts graph_counts() const;
  // The most step shapes whose recordings are kept.
  static constexpr size_t kCachedGraphs = 8;

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

  // One step shape's recording and the device buffers it reads and writes; `rotation` keeps the
  // tables it was recorded with alive (the rotation cache may drop them).
  struct StepGraph {
    tensor::Tensor patches;      // [image_len, patch_features]: rewritten before each replay
    tensor::Tensor frequencies;  // [1, 256]: the timestep's sinusoidal features, rewritten
    tensor::Tensor stream;       // [image_padded + cap_padded, dim]: caption rows rewritten
    tensor::Tensor pad_ids;      // i32 zeros: the image pads' rows of x_pad_token
    tensor::Tensor out;          // [image_len, patch_features]: read back after each replay
    Rotation rotation;
    tensor::DeviceGraph graph;
    uint64_t last_use = 0;
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
  // The sinusoidal features of t * t_scale, [1, 256] host float32.
  tensor::Tensor timestep_frequencies(float t) const;
  // frequencies [1, 256] on the placement -> adaln [1, adaln_dim]: Linear -> SiLU -> Linear.
  tensor::Tensor timestep_embedding(const tensor::Tensor& frequencies) const;
  // The caption tokens: RMSNorm + Linear of caption [cap_len, cap_feat_dim] (on the placement) into
  // the first cap_len rows of cap [cap_padded, dim], cap_pad_token into the rest (ids: at least that
  // many zeros, an index tensor).
  void embed_caption(const tensor::Tensor& caption, const tensor::Tensor& pad_ids, tensor::Tensor& cap) const;
  // Queues everything after the caption embedding, reading only device-resident tensors when they
  // are: frequencies [1, 256] and patches [image_len, patch_features] on the placement; the image
  // tokens go to stream rows [0, image_padded) (pads from x_pad_token through pad_ids, at least
  // image_padded - image_len zeros), whose last rows hold the embedded caption; the refiners and
  // the joint blocks run over stream in place, the final layer writes out [image_len,
  // patch_features].
  void run_stream(const tensor::Tensor& frequencies, const tensor::Tensor& patches, const tensor::Tensor& pad_ids,
                  const Rotation& all, int64_t image_padded, tensor::Tensor& stream, tensor::Tensor& out) const;
  // The output patches (host float32) of the graph path, recording the shape on first use;
  // undefined when recording failed (graphs are then off and the caller runs the step eagerly).
  tensor::Tensor forward_graph(const std::array<int64_t, 3>& key, const tensor::Tensor& patches,
                               const tensor::Tensor& frequencies, const tensor::Tensor& caption, const Rotation& all,
                               int64_t image_padded, int64_t cap_padded) const;
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
  // Recordings by step shape (forward_graph), the same keys as rotations_.
  mutable std::mutex graph_mutex_;
  mutable bool cuda_graphs_ = true;
  mutable std::map<std::array<int64_t, 3>, StepGraph> graphs_;
  mutable uint64_t graph_uses_ = 0;
  mutable GraphCounts graph_counts_;
};

}  // namespace omni::model::z_image
