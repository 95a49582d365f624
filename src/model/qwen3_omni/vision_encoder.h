// The Qwen3-Omni vision encoder (`thinker.visual`, transformers' Qwen3OmniMoeVisionEncoder, the
// Qwen3-VL ViT): the processor's patches of images and videos in, one row of the thinker's width
// per 2 x 2 block of patches out, plus one DeepStack row per block for each of
// deepstack_visual_indexes (the text model adds them to its hidden states after its first layers).
//
// For the media of one request together (each with its grid t x h x w of patches, the patches of a
// 2 x 2 block consecutive, as model/vision_processor.h lays them out):
//   1. patch_embed: the Conv3d of kernel = stride = (temporal_patch, patch, patch), i.e. one
//      product of each flattened patch [channels * temporal_patch * patch * patch] with the kernel;
//   2. plus the learned position embedding (a sqrt(num_position_embeddings)-sided square grid)
//      resampled bilinearly with aligned corners to the medium's h x w grid, the same for every t;
//   3. depth pre-LayerNorm blocks (eps 1e-6): attention with a fused qkv projection, the 2-D rotary
//      embedding (the first half of each head's frequencies turned by the patch's row, the second
//      by its column, theta from rope_parameters, 10000 by default; NeoX halves), bidirectional
//      within each temporal slice of each medium; a GELU (tanh) MLP;
//   4. after block i of deepstack_visual_indexes: merger_list[k] (the 4 rows of each block
//      concatenated, LayerNorm over the 4 * hidden values, Linear, exact GELU, Linear to
//      out_hidden_size);
//   5. merger: LayerNorm of each patch row, the 4 rows of a block concatenated, the same MLP.
//
// Runs through tensor/ops.h on the device and in the dtype of its Placement (the CPU in float32, or
// a CUDA device in float32/bfloat16/float16). The q and k rows of each head of the qkv projection
// are reordered at loading so that the NeoX halves (j, j + head/2) become neighbours (2j, 2j + 1):
// ops::rotate_pairs then turns them, and q . k is unchanged. Patches in and rows out are host
// float32. Immutable after loading; encode() may be called from any thread of a CPU placement, and
// from one thread at a time on a GPU (its stream).
//
// Runs on the CPU in float32 (weights widened from the checkpoint's dtype). Immutable after
// loading; encode() may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/json.h"
#include "model/placement.h"
#include "tensor/tensor.h"

namespace omni::model {
class Checkpoint;
}

namespace omni::model::qwen3_omni {

struct VisionEncoderConfig {
  int depth = 27;
  int hidden_size = 1152;
  int num_heads = 16;
  int intermediate_size = 4304;
  int out_hidden_size = 2048;
  int patch_size = 16;
  int temporal_patch_size = 2;
  int spatial_merge_size = 2;
  int in_channels = 3;
  int num_position_embeddings = 2304;
  std::vector<int> deepstack_visual_indexes{8, 16, 24};
  float rope_theta = 10000.0f;

  // Values in one flattened patch: in_channels * temporal_patch_size * patch_size^2.
  int64_t patch_values() const {
    return static_cast<int64_t>(in_channels) * temporal_patch_size * patch_size * patch_size;
  }
};

// thinker_config.vision_config of a Qwen3-Omni config.json (`source` names it in errors):
// kLoadFailed naming a field of the wrong type or range (a non-square position grid, a DeepStack
// index past depth); kUnsupported for an activation other than gelu_pytorch_tanh.
VisionEncoderConfig parse_vision_encoder_config(const Json& vision_config, const std::string& source);

// A medium's grid of patches: t temporal patches of h x w patches (h and w multiples of the merge).
using VisionGrid = std::array<int64_t, 3>;

struct VisionRows {
  tensor::Tensor rows;                    // [blocks of all media, out_hidden_size] host float32
  std::vector<tensor::Tensor> deepstack;  // one like rows per deepstack_visual_indexes entry
};

class VisionEncoder {
 public:
  // Loads `prefix`patch_embed.proj.weight … of `ckpt` (prefix "thinker.visual.") onto `placement`.
  // kLoadFailed naming a missing or mis-shaped tensor.
  VisionEncoder(const Checkpoint& ckpt, const VisionEncoderConfig& config, const std::string& prefix,
                Placement placement = {});

  const VisionEncoderConfig& config() const { return config_; }
  const Placement& placement() const { return placement_; }
  // The rows of media whose patches are `patches` [sum of t * h * w, patch_values()] (one medium
  // after another) with grids `grids`. kInvalidArgument for a grid that does not fit the patches or
  // the merge.
  VisionRows encode(const tensor::Tensor& patches, std::span<const VisionGrid> grids) const;

 private:
  struct Block {
    tensor::Tensor norm1_w, norm1_b, qkv_w, qkv_b, proj_w, proj_b, norm2_w, norm2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  };
  struct Merger {
    tensor::Tensor norm_w, norm_b, fc1_w, fc1_b, fc2_w, fc2_b;
  };
  // A weight of the checkpoint on the placement.
  tensor::Tensor weight(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape) const;
  Merger load_merger(const Checkpoint& ckpt, const std::string& name, bool norm_after_merge) const;
  // merger's output for patch rows h [patches, hidden] (on the placement): [patches / 4,
  // out_hidden_size] host float32.
  tensor::Tensor merge(const Merger& m, const tensor::Tensor& h, bool norm_after_merge) const;
  // The interpolated position embedding of every patch, in patch order: [patches, hidden] host
  // float32.
  tensor::Tensor position_embedding(std::span<const VisionGrid> grids, int64_t patches) const;

  VisionEncoderConfig config_;
  Placement placement_;
  tensor::Tensor patch_w_, patch_b_;
  tensor::Tensor pos_embed_;  // host float32
  std::vector<Block> blocks_;
  Merger merger_;
  std::vector<Merger> deepstack_mergers_;
};

}  // namespace omni::model::qwen3_omni
