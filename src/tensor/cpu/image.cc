// The image ops (channels-last images) and the bidirectional attention of image transformers.
//
// The products go through gemm (gemm.h): one fma chain per output element in a fixed order, so a
// pixel's or a token's result does not depend on how the work is split over threads.
#include <algorithm>
#include <cmath>
#include <vector>

#include "tensor/cpu/gemm.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/thread_pool.h"

namespace omni::tensor::cpu {

namespace {

// Floats of im2col scratch a convolution fills at a time (its output pixels are independent).
constexpr int64_t kScratchFloats = int64_t{1} << 22;

}  // namespace

void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int padding, int stride, Tensor& out) {
  const int64_t in_h = x.dim(0), in_w = x.dim(1), cin = x.dim(2);
  const int64_t cout = weight.dim(0), k = weight.dim(2);
  const int64_t out_h = out.dim(0), out_w = out.dim(1);
  const int64_t patch = cin * k * k;  // one im2col row, in the weight's (c_in, ky, kx) order
  const int64_t pixels = out_h * out_w;
  const int64_t chunk = std::max<int64_t>(1, std::min(pixels, kScratchFloats / std::max<int64_t>(patch, 1)));
  std::vector<float> cols(static_cast<size_t>(chunk * patch));
  const float* in = x.data<float>();
  const float* b = bias.defined() ? bias.data<float>() : nullptr;
  float* o = out.data<float>();
  for (int64_t p0 = 0; p0 < pixels; p0 += chunk) {
    const int64_t n = std::min(chunk, pixels - p0);
    parallel_for(n, std::max<int64_t>(1, 8192 / std::max<int64_t>(patch, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t p = p0 + r, oy = p / out_w, ox = p % out_w;
        float* row = cols.data() + r * patch;
        for (int64_t ky = 0; ky < k; ++ky) {
          const int64_t iy = oy * stride + ky - padding;
          for (int64_t kx = 0; kx < k; ++kx) {
            const int64_t ix = ox * stride + kx - padding;
            const bool inside = iy >= 0 && iy < in_h && ix >= 0 && ix < in_w;
            const float* src = inside ? in + (iy * in_w + ix) * cin : nullptr;
            for (int64_t c = 0; c < cin; ++c) row[(c * k + ky) * k + kx] = inside ? src[c] : 0.0f;
          }
        }
      }
    });
    float* dst = o + p0 * cout;
    gemm(n, cout, patch, GemmOperands{cols.data(), patch, weight.data<float>(), 1, patch, dst, cout}, false);
    if (b != nullptr) {
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < cout; ++c) dst[r * cout + c] += b[c];
    }
  }
}

void group_norm(const Tensor& x, int groups, const Tensor& weight, const Tensor& bias, float eps, Tensor& out) {
  const int64_t n = x.dim(0), c = x.dim(1), per = c / groups;
  const float* in = x.data<float>();
  const float* w = weight.data<float>();
  const float* b = bias.data<float>();
  float* o = out.data<float>();
  std::vector<double> sum(static_cast<size_t>(groups), 0.0), sq(static_cast<size_t>(groups), 0.0);
  for (int64_t p = 0; p < n; ++p) {
    const float* row = in + p * c;
    for (int64_t ch = 0; ch < c; ++ch) {
      sum[ch / per] += row[ch];
      sq[ch / per] += static_cast<double>(row[ch]) * row[ch];
    }
  }
  std::vector<float> mean(static_cast<size_t>(groups)), inv(static_cast<size_t>(groups));
  const double count = static_cast<double>(n * per);
  for (int g = 0; g < groups; ++g) {
    const double m = sum[g] / count;
    const double var = std::max(0.0, sq[g] / count - m * m);
    mean[g] = static_cast<float>(m);
    inv[g] = static_cast<float>(1.0 / std::sqrt(var + eps));
  }
  parallel_for(n, std::max<int64_t>(1, 8192 / std::max<int64_t>(c, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const float* row = in + p * c;
      float* dst = o + p * c;
      for (int64_t ch = 0; ch < c; ++ch) {
        const int64_t g = ch / per;
        dst[ch] = (row[ch] - mean[g]) * inv[g] * w[ch] + b[ch];
      }
    }
  });
}

void silu(const Tensor& x, Tensor& out) {
  const float* in = x.data<float>();
  float* o = out.data<float>();
  parallel_for(x.numel(), 16384, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) o[i] = in[i] / (1.0f + std::exp(-in[i]));
  });
}

void tanh(const Tensor& x, Tensor& out) {
  const float* in = x.data<float>();
  float* o = out.data<float>();
  parallel_for(x.numel(), 16384, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) o[i] = std::tanh(in[i]);
  });
}

void upsample_nearest2x(const Tensor& x, Tensor& out) {
  const int64_t h = x.dim(0), w = x.dim(1), c = x.dim(2);
  const float* in = x.data<float>();
  float* o = out.data<float>();
  parallel_for(2 * h, 1, [&](int64_t begin, int64_t end) {
    for (int64_t oy = begin; oy < end; ++oy) {
      const float* src_row = in + (oy / 2) * w * c;
      float* dst_row = o + oy * 2 * w * c;
      for (int64_t ox = 0; ox < 2 * w; ++ox) std::copy_n(src_row + (ox / 2) * c, c, dst_row + ox * c);
    }
  });
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out) {
  const int64_t s = q.dim(0), heads = q.dim(1), d = q.dim(2), skv = k.dim(0);
  const int64_t stride = heads * d;
  std::vector<float> scores(static_cast<size_t>(s * skv));
  for (int64_t h = 0; h < heads; ++h) {
    gemm(s, skv, d, GemmOperands{q.data<float>() + h * d, stride, k.data<float>() + h * d, 1, stride, scores.data(), skv},
         false);
    parallel_for(s, std::max<int64_t>(1, 4096 / std::max<int64_t>(skv, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        float* row = scores.data() + i * skv;
        float mx = -INFINITY;
        for (int64_t j = 0; j < skv; ++j) mx = std::max(mx, row[j] * scale);
        float total = 0.0f;
        for (int64_t j = 0; j < skv; ++j) {
          row[j] = std::exp(row[j] * scale - mx);
          total += row[j];
        }
        const float inv = 1.0f / total;
        for (int64_t j = 0; j < skv; ++j) row[j] *= inv;
      }
    });
    gemm(s, d, skv, GemmOperands{scores.data(), skv, v.data<float>() + h * d, stride, 1, out.data<float>() + h * d, stride},
         false);
  }
}

void rotate_pairs(Tensor& x, const Tensor& cos, const Tensor& sin) {
  const int64_t t = x.dim(0), heads = x.dim(1), half = x.dim(2) / 2;
  float* data = x.data<float>();
  const float* c = cos.data<float>();
  const float* s = sin.data<float>();
  parallel_for(t, std::max<int64_t>(1, 4096 / std::max<int64_t>(heads * half, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t h = 0; h < heads; ++h) {
        float* p = data + (i * heads + h) * 2 * half;
        for (int64_t j = 0; j < half; ++j) {
          const float re = p[2 * j], im = p[2 * j + 1], cr = c[i * half + j], si = s[i * half + j];
          p[2 * j] = re * cr - im * si;
          p[2 * j + 1] = re * si + im * cr;
        }
      }
    }
  });
}

void mul_columns(const Tensor& x, const Tensor& scale, Tensor& out) {
  const int64_t d = x.dim(-1);
  const int64_t rows = d == 0 ? 0 : x.numel() / d;
  const float* in = x.data<float>();
  const float* sc = scale.data<float>();
  float* o = out.data<float>();
  parallel_for(rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(d, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t i = 0; i < d; ++i) o[r * d + i] = in[r * d + i] * sc[i];
  });
}

}  // namespace omni::tensor::cpu
