// The Qwen2.5-Omni vision encoder (`thinker.visual`, transformers' Qwen2_5OmniVisionEncoder, the
// Qwen2.5-VL ViT): the processor's patches of images and videos in (model/vision_processor.h's
// layout), one row of the thinker's width per spatial_merge_size^2 block of patches out.
//
// For the media of one request together (each with its grid t x h x w of patches):
//   1. the merge blocks are reordered into windows (window_layout below): per temporal slice of each
//      medium, squares of window_size / spatial_merge_size / patch_size blocks (112 px: 4 x 4 blocks
//      of 2 x 2 patches), row-major over the squares and within each, the squares at the right and
//      bottom edges cut short; every later step sees the patches in this order;
//   2. patch_embed: the Conv3d of kernel = stride = (temporal_patch, patch, patch) without bias, one
//      product of each flattened patch with the kernel;
//   3. depth blocks: RMSNorm (eps 1e-6) norm1, attention with separate q/k/v/proj projections (all
//      with bias) and the 2-D rotary embedding (the first half of each head's frequencies turned by
//      the patch's row, the second half by its column, theta 10000; NeoX halves), bidirectional
//      within each window, or within each temporal slice of each medium for the blocks of
//      fullatt_block_indexes; RMSNorm norm2 and a SwiGLU MLP with biases;
//   4. merger: RMSNorm ln_q of each patch row, the rows of a block concatenated, Linear, exact
//      GELU, Linear to out_hidden_size;
//   5. the blocks' rows put back into the processor's order (the inverse of step 1).
//
// Runs through tensor/ops.h on the device and in the dtype of its Placement (the CPU in float32, or
// a CUDA device in float32/bfloat16/float16). The reordering happens on the host around the device
// work (the patches before the upload, the rows after the download). The q and k rows of each head
// are interleaved at loading so that the NeoX halves (j, j + head/2) become neighbours (2j, 2j + 1)
// for ops::rotate_pairs (q . k is unchanged); gate_proj and up_proj are fused into one product for
// ops::silu_and_mul. Patches in and rows out are host float32. Immutable after loading; encode()
// may be called from any thread of a CPU placement, and from one thread at a time on a GPU.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/json.h"
#include "model/placement.h"
#include "model/vision_processor.h"
#include "tensor/tensor.h"

namespace omni::model {
class Checkpoint;
}

namespace omni::model::qwen2_5_omni {

struct VisionEncoderConfig {
  int depth = 32;
  int hidden_size = 1280;
  int num_heads = 16;
  int intermediate_size = 3420;
  int out_hidden_size = 3584;
  int patch_size = 14;
  int temporal_patch_size = 2;
  int spatial_merge_size = 2;
  int in_channels = 3;
  int window_size = 112;
  std::vector<int> fullatt_block_indexes{7, 15, 23, 31};

  // Values in one flattened patch: in_channels * temporal_patch_size * patch_size^2.
  int64_t patch_values() const {
    return static_cast<int64_t>(in_channels) * temporal_patch_size * patch_size * patch_size;
  }
  // The side of a window in merge blocks: window_size / spatial_merge_size / patch_size.
  int window_blocks() const { return window_size / spatial_merge_size / patch_size; }
};

// thinker_config.vision_config of a Qwen2.5-Omni config.json (`source` names it in errors):
// kLoadFailed naming a field of the wrong type or range (a window smaller than one merge block, a
// full-attention index past depth, a head size not divisible by 4); kUnsupported for a hidden_act
// other than silu.
VisionEncoderConfig parse_vision_encoder_config(const Json& vision_config, const std::string& source);
// The same from a whole Qwen2.5-Omni config.json (`source`: its path): kLoadFailed naming
// 'thinker_config.vision_config' when it is missing.
VisionEncoderConfig thinker_vision_config(const Json& config, const std::string& source);

// The window reordering of step 1 for media with `grids`.
struct WindowLayout {
  // order[k] = the merge block (in the processor's order over all media) at window position k: a
  // permutation of [0, blocks).
  std::vector<int64_t> order;
  // The patches of each non-empty window, in window order (sum = all patches).
  std::vector<int64_t> window_patches;
};
// kInvalidArgument naming the medium whose grid does not fit the merge.
WindowLayout window_layout(std::span<const VisionGrid> grids, int spatial_merge_size, int window_blocks);

class VisionEncoder {
 public:
  // Loads `prefix`patch_embed.proj.weight … of `ckpt` (prefix "thinker.visual.") onto `placement`.
  // kLoadFailed naming a missing or mis-shaped tensor.
  VisionEncoder(const Checkpoint& ckpt, const VisionEncoderConfig& config, const std::string& prefix,
                Placement placement = {});

  const VisionEncoderConfig& config() const { return config_; }
  const Placement& placement() const { return placement_; }
  // The rows of media whose patches are `patches` [sum of t * h * w, patch_values()] host float32
  // (one medium after another) with grids `grids`: [sum of t * h * w / merge^2, out_hidden_size]
  // host float32 in the processor's block order. kInvalidArgument for a grid that does not fit the
  // patches or the merge.
  tensor::Tensor encode(const tensor::Tensor& patches, std::span<const VisionGrid> grids) const;

 private:
  struct Block {
    tensor::Tensor norm1_w, q_w, q_b, k_w, k_b, v_w, v_b, proj_w, proj_b, norm2_w, gate_up_w, gate_up_b, down_w, down_b;
  };
  tensor::Tensor weight(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape) const;

  VisionEncoderConfig config_;
  Placement placement_;
  tensor::Tensor patch_w_;
  std::vector<Block> blocks_;
  tensor::Tensor ln_q_w_, fc1_w_, fc1_b_, fc2_w_, fc2_b_;
};

}  // namespace omni::model::qwen2_5_omni
