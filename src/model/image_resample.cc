#include "model/image_resample.h"

#include <algorithm>
#include <cmath>

namespace omni::model {
namespace {

// The antialiasing cubic kernel (Keys, a = -0.5, as PIL and torch's antialiased bicubic use).
double cubic(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
  return 0.0;
}

// For every output index along one dimension: the first input index, the tap count and the
// weights as 16-bit fixed point of `precision` fractional bits.
struct Taps {
  std::vector<int64_t> first;
  std::vector<int64_t> count;
  std::vector<int16_t> weights;  // [out, width]
  int64_t width = 0;
  int precision = 0;
};

Taps taps(int64_t in, int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  Taps t;
  t.width = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(out);
  t.count.resize(out);
  std::vector<double> w(static_cast<size_t>(out * t.width), 0.0);
  double largest = 0.0;
  for (int64_t i = 0; i < out; ++i) {
    const double center = scale * (static_cast<double>(i) + 0.5);
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t n =
        std::clamp<int64_t>(std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in) - lo, 0, t.width);
    double* wi = w.data() + i * t.width;
    double total = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      wi[j] = cubic((static_cast<double>(j + lo) - center + 0.5) * invscale);
      total += wi[j];
    }
    if (total != 0.0) {
      for (int64_t j = 0; j < n; ++j) wi[j] /= total;
    }
    for (int64_t j = 0; j < n; ++j) largest = std::max(largest, wi[j]);
    t.first[i] = lo;
    t.count[i] = n;
  }
  // The most fractional bits that keep the largest weight within int16.
  for (t.precision = 0; t.precision < 22; ++t.precision) {
    if (static_cast<int>(0.5 + largest * (1 << (t.precision + 1))) >= (1 << 15)) break;
  }
  t.weights.resize(w.size());
  for (size_t k = 0; k < w.size(); ++k) {
    const double v = w[k] * (1 << t.precision);
    t.weights[k] = static_cast<int16_t>(v < 0 ? v - 0.5 : v + 0.5);
  }
  return t;
}

uint8_t clip8(int32_t sum, int precision) { return static_cast<uint8_t>(std::clamp(sum >> precision, 0, 255)); }

}  // namespace

std::vector<uint8_t> resize_bicubic_antialias(std::span<const uint8_t> pixels, int64_t height, int64_t width,
                                              int64_t channels, int64_t out_height, int64_t out_width) {
  std::vector<uint8_t> src(pixels.begin(), pixels.end());
  // Width first, to 8 bits.
  if (out_width != width) {
    const Taps t = taps(width, out_width);
    std::vector<uint8_t> mid(static_cast<size_t>(height * out_width * channels));
    for (int64_t y = 0; y < height; ++y) {
      for (int64_t x = 0; x < out_width; ++x) {
        const int16_t* w = t.weights.data() + x * t.width;
        for (int64_t c = 0; c < channels; ++c) {
          const uint8_t* row = src.data() + (y * width + t.first[x]) * channels + c;
          int32_t sum = 1 << (t.precision - 1);
          for (int64_t j = 0; j < t.count[x]; ++j) sum += static_cast<int32_t>(row[j * channels]) * w[j];
          mid[(y * out_width + x) * channels + c] = clip8(sum, t.precision);
        }
      }
    }
    src = std::move(mid);
  }
  // Then the height.
  if (out_height != height) {
    const Taps t = taps(height, out_height);
    const int64_t stride = out_width * channels;
    std::vector<uint8_t> dst(static_cast<size_t>(out_height * stride));
    for (int64_t y = 0; y < out_height; ++y) {
      const int16_t* w = t.weights.data() + y * t.width;
      for (int64_t i = 0; i < stride; ++i) {
        const uint8_t* col = src.data() + t.first[y] * stride + i;
        int32_t sum = 1 << (t.precision - 1);
        for (int64_t j = 0; j < t.count[y]; ++j) sum += static_cast<int32_t>(col[j * stride]) * w[j];
        dst[y * stride + i] = clip8(sum, t.precision);
      }
    }
    src = std::move(dst);
  }
  return src;
}

}  // namespace omni::model
