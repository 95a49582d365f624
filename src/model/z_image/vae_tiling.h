// Tiled VAE decoding as diffusers' AutoencoderKL does it with enable_tiling() (vae_use_tiling):
// the latents are cut into overlapping square tiles, each tile goes through the decoder alone, and
// the decoded tiles are blended linearly where they overlap, so that the memory of one decode is
// bounded by the tile size whatever the image size.
//
// With sample_size S (vae/config.json) and a decoder of B blocks: tiles of T = S / 2^(B-1) latent
// rows and columns start every int(T * 0.75) latents (the last ones of a row or column are
// cut at the edge); each decoded tile blends its first int(S * 0.25) rows with the tile above and
// then its first int(S * 0.25) columns with the tile on its left (both as already blended), and
// keeps its first S - int(S * 0.25) rows and columns. Only latents larger than T on one side take
// this path; smaller ones decode whole. The scaling and shift of the latents come before the
// tiling (the pipeline applies them to the whole latents before vae.decode), which is the same
// thing elementwise.
//
// The tiles are decoded on the decoder's device; the blending works on the host float32 tiles the
// decoder returns. Pure functions of their arguments; any thread.
#pragma once

#include <functional>

#include "tensor/tensor.h"

namespace omni::model::z_image {

struct VaeTiling {
  static constexpr double kOverlapFactor = 0.25;  // diffusers' tile_overlap_factor

  int tile_sample_min_size = 0;  // S: the image side of a full tile
  int tile_latent_min_size = 0;  // T: its latent side

  // `sample_size` S and the decoder's upsampling factor 2^(B-1). Throws omni::Error
  // (kInvalidArgument) when S is not positive (a list in the config) or not larger than the factor.
  static VaeTiling of(int sample_size, int scale_factor);

  int overlap_size() const { return static_cast<int>(tile_latent_min_size * (1 - kOverlapFactor)); }
  int blend_extent() const { return static_cast<int>(tile_sample_min_size * kOverlapFactor); }
  int row_limit() const { return tile_sample_min_size - blend_extent(); }
  // Whether latents of h x w take the tiled path (diffusers' _decode condition).
  bool applies(int64_t h, int64_t w) const { return h > tile_latent_min_size || w > tile_latent_min_size; }
};

// A decoder of one tile: channels-last latents [h, w, C] (host float32, already scaled and shifted)
// -> the image [h * f, w * f, channels] (host float32).
using TileDecoder = std::function<tensor::Tensor(const tensor::Tensor& latents_hwc)>;

// The tiled decode of channels-last latents [h, w, C] (host float32, scaled and shifted), whatever
// their size (the caller checks applies()).
tensor::Tensor tiled_decode(const tensor::Tensor& latents_hwc, const VaeTiling& tiling, const TileDecoder& decode);

// diffusers' blend_v / blend_h on channels-last host float32 images: the first rows (columns) of `b`
// become a linear blend from the last rows (columns) of `a` into `b`, over min(extent, both sizes)
// rows (columns): b[y] = a[rows - e + y] * (1 - y / e) + b[y] * (y / e). `a` and `b` must have the same
// width (blend_v) or height (blend_h) and channel count.
void blend_v(const tensor::Tensor& a, tensor::Tensor& b, int extent);
void blend_h(const tensor::Tensor& a, tensor::Tensor& b, int extent);

}  // namespace omni::model::z_image
