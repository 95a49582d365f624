#include "model/z_image/vae_tiling.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/error.h"

namespace omni::model::z_image {

using tensor::DType;
using tensor::Tensor;

namespace {

// Rows [r0, r1) and columns [c0, c1) of a channels-last host float32 tensor, as a new tensor.
Tensor crop(const Tensor& x, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const int64_t w = x.dim(1), ch = x.dim(2);
  Tensor out = Tensor::empty({r1 - r0, c1 - c0, ch}, DType::kF32);
  const float* src = x.data<float>();
  float* dst = out.data<float>();
  for (int64_t r = r0; r < r1; ++r) {
    std::memcpy(dst + (r - r0) * (c1 - c0) * ch, src + (r * w + c0) * ch, static_cast<size_t>((c1 - c0) * ch) * 4);
  }
  return out;
}

void check_pair(const Tensor& a, const Tensor& b, int same_dim, const char* what) {
  if (a.rank() != 3 || b.rank() != 3 || a.dtype() != DType::kF32 || b.dtype() != DType::kF32 ||
      a.dim(same_dim) != b.dim(same_dim) || a.dim(2) != b.dim(2)) {
    throw_error(ErrorCode::kInvalidArgument, "{}: tiles {} and {} do not line up", what,
                tensor::shape_to_string(a.shape()), tensor::shape_to_string(b.shape()));
  }
}

// The two weights of row (column) y of a blend over e rows, rounded to float32 as torch rounds a
// Python scalar multiplied into a float32 tensor.
struct BlendWeights {
  float from_a, from_b;
};
BlendWeights weights(int y, int e) {
  const double t = static_cast<double>(y) / e;
  return {static_cast<float>(1.0 - t), static_cast<float>(t)};
}

}  // namespace

VaeTiling VaeTiling::of(int sample_size, int scale_factor) {
  if (sample_size <= 0) {
    throw_error(ErrorCode::kInvalidArgument,
                "vae_use_tiling: the VAE's sample_size must be one integer (vae/config.json), tiling cannot use it");
  }
  VaeTiling t;
  t.tile_sample_min_size = sample_size;
  t.tile_latent_min_size = sample_size / scale_factor;  // int(sample_size / 2 ** (blocks - 1))
  if (t.tile_latent_min_size < 1 || t.overlap_size() < 1 || t.blend_extent() < 1) {
    throw_error(ErrorCode::kInvalidArgument,
                "vae_use_tiling: the VAE's sample_size {} is too small for tiles of its {}x decoder", sample_size,
                scale_factor);
  }
  return t;
}

void blend_v(const Tensor& a, Tensor& b, int extent) {
  check_pair(a, b, 1, "blend_v");
  const int64_t e = std::min<int64_t>({a.dim(0), b.dim(0), extent});
  const int64_t row = b.dim(1) * b.dim(2);
  const float* pa = a.data<float>();
  float* pb = b.data<float>();
  for (int64_t y = 0; y < e; ++y) {
    const BlendWeights w = weights(static_cast<int>(y), static_cast<int>(e));
    const float* src = pa + (a.dim(0) - e + y) * row;
    float* dst = pb + y * row;
    for (int64_t i = 0; i < row; ++i) {
      const float from_a = src[i] * w.from_a;
      const float from_b = dst[i] * w.from_b;
      dst[i] = from_a + from_b;
    }
  }
}

void blend_h(const Tensor& a, Tensor& b, int extent) {
  check_pair(a, b, 0, "blend_h");
  const int64_t e = std::min<int64_t>({a.dim(1), b.dim(1), extent});
  const int64_t ch = b.dim(2), aw = a.dim(1), bw = b.dim(1);
  const float* pa = a.data<float>();
  float* pb = b.data<float>();
  for (int64_t x = 0; x < e; ++x) {
    const BlendWeights w = weights(static_cast<int>(x), static_cast<int>(e));
    for (int64_t y = 0; y < b.dim(0); ++y) {
      const float* src = pa + (y * aw + aw - e + x) * ch;
      float* dst = pb + (y * bw + x) * ch;
      for (int64_t c = 0; c < ch; ++c) {
        const float from_a = src[c] * w.from_a;
        const float from_b = dst[c] * w.from_b;
        dst[c] = from_a + from_b;
      }
    }
  }
}

Tensor tiled_decode(const Tensor& latents_hwc, const VaeTiling& tiling, const TileDecoder& decode) {
  if (latents_hwc.rank() != 3 || latents_hwc.dtype() != DType::kF32) {
    throw_error(ErrorCode::kInvalidArgument, "tiled_decode: latents must be float32 [h, w, C], got {}",
                tensor::shape_to_string(latents_hwc.shape()));
  }
  const int64_t h = latents_hwc.dim(0), w = latents_hwc.dim(1);
  const int64_t t = tiling.tile_latent_min_size, step = tiling.overlap_size();
  // Every tile decoded, row by row; blending rewrites them in place, in diffusers' order, so that a
  // tile blends with its neighbours as they already are blended.
  std::vector<std::vector<Tensor>> rows;
  for (int64_t i = 0; i < h; i += step) {
    std::vector<Tensor> row;
    for (int64_t j = 0; j < w; j += step) {
      row.push_back(decode(crop(latents_hwc, i, std::min(i + t, h), j, std::min(j + t, w))));
    }
    rows.push_back(std::move(row));
  }
  const int extent = tiling.blend_extent();
  const int64_t limit = tiling.row_limit();
  std::vector<std::vector<Tensor>> kept(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t j = 0; j < rows[i].size(); ++j) {
      Tensor& tile = rows[i][j];
      if (i > 0) blend_v(rows[i - 1][j], tile, extent);
      if (j > 0) blend_h(rows[i][j - 1], tile, extent);
      kept[i].push_back(crop(tile, 0, std::min(limit, tile.dim(0)), 0, std::min(limit, tile.dim(1))));
    }
  }
  // Concatenate: the kept tiles of a row side by side, the rows one under the other.
  int64_t out_h = 0, out_w = 0;
  for (const auto& row : kept) out_h += row.front().dim(0);
  for (const Tensor& tile : kept.front()) out_w += tile.dim(1);
  const int64_t ch = kept.front().front().dim(2);
  Tensor out = Tensor::empty({out_h, out_w, ch}, DType::kF32);
  int64_t r0 = 0;
  for (const auto& row : kept) {
    int64_t c0 = 0;
    for (const Tensor& tile : row) {
      if (tile.dim(0) != row.front().dim(0) || c0 + tile.dim(1) > out_w) {
        throw_error(ErrorCode::kInternal, "tiled_decode: tile {} does not fit the row",
                    tensor::shape_to_string(tile.shape()));
      }
      for (int64_t r = 0; r < tile.dim(0); ++r) {
        std::memcpy(out.data<float>() + ((r0 + r) * out_w + c0) * ch, tile.data<float>() + r * tile.dim(1) * ch,
                    static_cast<size_t>(tile.dim(1) * ch) * 4);
      }
      c0 += tile.dim(1);
    }
    r0 += row.front().dim(0);
  }
  return out;
}

}  // namespace omni::model::z_image
