// The audio encoders' ops on the CPU (tensor/ops.h): ELU, sigmoid, the unfolding of a 1-D
// convolution's input rows, column copies, attentive statistics pooling and the nearest-entry step of
// a residual vector quantizer. Each element, row or channel is computed alone on the backend's
// threads, so the result does not depend on the split.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/thread_pool.h"

namespace omni::tensor::cpu {
namespace {

constexpr int64_t kElementGrain = 1 << 15;

// The row of x [rows, ...] that index i reads under `padding`, or -1 for a zero row.
int64_t padded_row(int64_t i, int64_t rows, ops::RowPadding padding) {
  if (i >= 0 && i < rows) return i;
  switch (padding) {
    case ops::RowPadding::kZeros:
      return -1;
    case ops::RowPadding::kReplicate:
      return i < 0 ? 0 : rows - 1;
    case ops::RowPadding::kReflect:
      return i < 0 ? -i : 2 * (rows - 1) - i;
  }
  return -1;
}

}  // namespace

void elu(const Tensor& x, Tensor& out) {
  const float* in = x.data<float>();
  float* o = out.data<float>();
  parallel_for(x.numel(), kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) o[i] = in[i] > 0.0f ? in[i] : std::expm1(in[i]);
  });
}

void sigmoid(const Tensor& x, Tensor& out) {
  const float* in = x.data<float>();
  float* o = out.data<float>();
  parallel_for(x.numel(), kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) o[i] = 1.0f / (1.0f + std::exp(-in[i]));
  });
}

void unfold_rows(const Tensor& x, int kernel, int stride, int dilation, int64_t left, ops::RowPadding padding,
                 int64_t first, Tensor& out) {
  const int64_t rows = x.dim(0), channels = x.dim(1), width = kernel * channels;
  const float* in = x.data<float>();
  float* o = out.data<float>();
  parallel_for(out.dim(0), std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, width)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) {
                   for (int j = 0; j < kernel; ++j) {
                     const int64_t src =
                         padded_row((first + r) * stride + static_cast<int64_t>(j) * dilation - left, rows, padding);
                     float* dst = o + r * width + static_cast<int64_t>(j) * channels;
                     if (src < 0) {
                       std::fill_n(dst, channels, 0.0f);
                     } else {
                       std::copy_n(in + src * channels, channels, dst);
                     }
                   }
                 }
               });
}

void copy_columns(const Tensor& src, int64_t src_column, Tensor& dst, int64_t dst_column, int64_t width) {
  const int64_t a = src.dim(1), b = dst.dim(1);
  const float* in = src.data<float>();
  float* o = dst.data<float>();
  parallel_for(src.dim(0), std::max<int64_t>(1, kElementGrain / width), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) std::copy_n(in + r * a + src_column, width, o + r * b + dst_column);
  });
}

void weighted_mean_std(const Tensor& x, const Tensor& logits, Tensor& out) {
  const int64_t steps = x.dim(0), channels = x.dim(1);
  const float* v = x.data<float>();
  const float* l = logits.defined() ? logits.data<float>() : nullptr;
  float* o = out.data<float>();
  parallel_for(channels, 16, [&](int64_t begin, int64_t end) {
    std::vector<double> w(static_cast<size_t>(steps));
    for (int64_t c = begin; c < end; ++c) {
      if (l) {
        double peak = -INFINITY, z = 0;
        for (int64_t t = 0; t < steps; ++t) peak = std::max(peak, static_cast<double>(l[t * channels + c]));
        for (int64_t t = 0; t < steps; ++t) z += w[t] = std::exp(l[t * channels + c] - peak);
        for (int64_t t = 0; t < steps; ++t) w[t] /= z;
      } else {
        std::fill(w.begin(), w.end(), 1.0 / static_cast<double>(steps));
      }
      double mean = 0;
      for (int64_t t = 0; t < steps; ++t) mean += w[t] * v[t * channels + c];
      double var = 0;
      for (int64_t t = 0; t < steps; ++t) {
        const double d = v[t * channels + c] - mean;
        var += w[t] * d * d;
      }
      o[c] = static_cast<float>(mean);
      o[channels + c] = static_cast<float>(std::sqrt(std::max(var, 1e-12)));
    }
  });
}

void nearest_codes(Tensor& residual, const Tensor& codebook, const Tensor& norms, const Tensor& dots, Tensor& codes,
                   int64_t column) {
  const int64_t frames = residual.dim(0), dim = residual.dim(1), entries = codebook.dim(0), q = codes.dim(1);
  float* res = residual.data<float>();
  const float* table = codebook.data<float>();
  const float* norm = norms.data<float>();
  const float* dot = dots.data<float>();
  int32_t* code = codes.data<int32_t>();
  parallel_for(frames, 4, [&](int64_t begin, int64_t end) {
    for (int64_t f = begin; f < end; ++f) {
      float* r = res + f * dim;
      const float* row = dot + f * entries;
      double best = INFINITY, magnitude = 0;
      for (int64_t d = 0; d < dim; ++d) magnitude += static_cast<double>(r[d]) * r[d];
      for (int64_t n = 0; n < entries; ++n) best = std::min(best, static_cast<double>(norm[n]) - 2.0 * row[n]);
      const double tolerance = 1e-4 * (magnitude + std::abs(best) + 1.0);
      int64_t chosen = 0;
      double chosen_distance = INFINITY;
      for (int64_t n = 0; n < entries; ++n) {
        if (static_cast<double>(norm[n]) - 2.0 * row[n] > best + tolerance) continue;
        const float* e = table + n * dim;
        double distance = 0;
        for (int64_t d = 0; d < dim; ++d) {
          const double diff = static_cast<double>(r[d]) - e[d];
          distance += diff * diff;
        }
        if (distance < chosen_distance) {
          chosen_distance = distance;
          chosen = n;
        }
      }
      code[f * q + column] = static_cast<int32_t>(chosen);
      const float* e = table + chosen * dim;
      for (int64_t d = 0; d < dim; ++d) r[d] -= e[d];
    }
  });
}

}  // namespace omni::tensor::cpu
