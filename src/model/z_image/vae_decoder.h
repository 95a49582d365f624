// The decoder half of diffusers' AutoencoderKL (the FLUX.1 VAE Z-Image uses), on the CPU in float32
// or on a CUDA device in its placement's dtype:
// latents -> (post_quant_conv) -> conv_in -> mid block (ResNet, single-head self-attention,
// ResNet) -> up blocks (layers_per_block + 1 ResNets each, then a nearest 2x upsample and a 3x3
// convolution, except the last) -> GroupNorm -> SiLU -> conv_out. Activations are channels-last
// ([H, W, C], tensor/ops.h's image ops), so the output is the RGB image row by row. The latents go
// in and the image comes out as host float32 tensors. With tiling (vae_use_tiling), latents larger
// than one tile decode tile by tile as diffusers' AutoencoderKL.tiled_decode does (vae_tiling.h).
// Immutable after construction; decode() from one thread at a time.
#pragma once

#include <filesystem>
#include <optional>
#include <vector>

#include "model/placement.h"
#include "model/z_image/config.h"
#include "model/z_image/vae_tiling.h"
#include "tensor/tensor.h"

namespace omni::model::z_image {

class VaeDecoder {
 public:
  // Loads the decoder.* (and post_quant_conv.*) tensors of `dir`/vae. Throws omni::Error(kLoadFailed)
  // naming a missing or mis-shaped tensor; with `use_tiling`, omni::Error(kInvalidArgument) when
  // the config's sample_size cannot make tiles (VaeTiling::of).
  VaeDecoder(const std::filesystem::path& dir, const VaeDecoderConfig& config, const Placement& placement = {},
             bool use_tiling = false);

  // latents [latent_channels, h, w] as the denoiser leaves them (the scaling and shift are applied
  // here) -> the image [h * f, w * f, out_channels] (host float32) in the decoder's range (about [-1, 1], not
  // clamped).
  tensor::Tensor decode(const tensor::Tensor& latents) const;

  // The tiling in use; nullopt when tiling is off.
  const std::optional<VaeTiling>& tiling() const { return tiling_; }

 private:
  struct Conv {
    tensor::Tensor weight, bias;
  };
  struct Norm {
    tensor::Tensor weight, bias;
  };
  struct ResNet {
    Norm norm1, norm2;
    Conv conv1, conv2;
    Conv shortcut;  // 1x1, when the channel count changes
  };
  struct UpBlock {
    std::vector<ResNet> resnets;
    Conv upsample;  // undefined weight for the last block
  };
  struct Attention {
    Norm norm;
    tensor::Tensor q_w, q_b, k_w, k_b, v_w, v_b, out_w, out_b;
  };

  tensor::Tensor conv(const tensor::Tensor& x, const Conv& c) const;
  tensor::Tensor resnet(const tensor::Tensor& x, const ResNet& r) const;
  tensor::Tensor attention(const tensor::Tensor& x, const Attention& a) const;
  tensor::Tensor norm_silu(const tensor::Tensor& x, const Norm& n) const;
  tensor::Tensor activation(tensor::Shape shape) const;
  // The network on scaled, channels-last host latents [h, w, C] -> host float32 [h * f, w * f, out].
  tensor::Tensor decode_scaled(const tensor::Tensor& latents_hwc) const;

  VaeDecoderConfig config_;
  Placement placement_;
  std::optional<VaeTiling> tiling_;
  Conv post_quant_conv_, conv_in_, conv_out_;
  ResNet mid_resnet0_, mid_resnet1_;
  bool has_mid_attention_ = false;
  Attention mid_attention_;
  std::vector<UpBlock> up_blocks_;
  Norm norm_out_;
};

}  // namespace omni::model::z_image
