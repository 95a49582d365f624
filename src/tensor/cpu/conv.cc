// Convolutions along time (time-major activations) for the audio decoders.
//
// Matrix products go to OpenBLAS. Its sgemm picks kernels and thread splits by the shape of the
// call (one row goes to gemv, small or odd row counts to kernels that sum in another order), so
// a row's result would depend on how many rows are computed with it, and a stream decoded in
// chunks would drift from the one-shot decode. Every product here therefore runs on tiles of
// exactly kRowTile rows (zero rows fill the last one): one call shape per layer, for which each
// row gets the same arithmetic wherever it sits in a tile. tests/tensor/ops_test.cc checks it.
// The price is the padding of short inputs (a one-frame chunk pays for a tile at frame rate).
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/thread_pool.h"

namespace omni::tensor::cpu {

namespace {

// Large enough that OpenBLAS's packing of the weights is amortised over many rows.
constexpr int64_t kRowTile = 64;

// out[r, :] = a[r, :] @ b^T (transpose_b) or a[r, :] @ b for r < rows, computed on `padded` rows
// of a (a holds them; rows past `rows` are zero) into a scratch when out cannot take them.
void product_rows(const float* a, int64_t rows, int64_t padded, const float* b, bool transpose_b, int64_t n, int64_t k,
                  float* out, std::vector<float>& scratch) {
  float* c = out;
  if (padded != rows) {
    scratch.resize(static_cast<size_t>(padded * n));
    c = scratch.data();
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(padded),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(k), b,
              static_cast<int>(transpose_b ? k : n), 0.0f, c, static_cast<int>(n));
  if (c != out) std::memcpy(out, c, static_cast<size_t>(rows * n) * sizeof(float));
}

void add_bias_rows(float* out, int64_t rows, int64_t n, const float* bias) {
  if (bias == nullptr) return;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = out + r * n;
    for (int64_t c = 0; c < n; ++c) row[c] += bias[c];
  }
}

void depthwise_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int dilation, Tensor& out) {
  const int64_t channels = x.dim(1), taps = weight.dim(2);
  // Tap-major weights, so the inner loop runs over contiguous channels.
  std::vector<float> w(static_cast<size_t>(taps * channels));
  const float* wsrc = weight.data<float>();
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t j = 0; j < taps; ++j) w[j * channels + c] = wsrc[c * taps + j];
  const float* in = x.data<float>();
  const float* b = bias.defined() ? bias.data<float>() : nullptr;
  float* o = out.data<float>();
  parallel_for(out.dim(0), std::max<int64_t>(1, 16384 / (channels * taps)), [&](int64_t begin, int64_t end) {
    std::vector<float> acc(static_cast<size_t>(channels));
    for (int64_t t = begin; t < end; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < taps; ++j) {
        const float* row = in + (t + j * dilation) * channels;
        const float* wj = w.data() + j * channels;
        for (int64_t c = 0; c < channels; ++c) acc[c] += wj[c] * row[c];
      }
      float* dst = o + t * channels;
      for (int64_t c = 0; c < channels; ++c) dst[c] = b ? acc[c] + b[c] : acc[c];
    }
  });
}

}  // namespace

void conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int dilation, int groups, Tensor& out) {
  if (groups != 1) {
    depthwise_conv1d(x, weight, bias, dilation, out);
    return;
  }
  const int64_t t_out = out.dim(0), c_in = x.dim(1), c_out = out.dim(1), taps = weight.dim(2);
  const int64_t width = c_in * taps;  // one im2col row: [c_in][taps], the order of weight's rows
  const float* in = x.data<float>();
  const float* w = weight.data<float>();
  const float* b = bias.defined() ? bias.data<float>() : nullptr;
  float* o = out.data<float>();
  std::vector<float> cols, scratch;
  for (int64_t begin = 0; begin < t_out; begin += kRowTile) {
    const int64_t rows = std::min(kRowTile, t_out - begin);
    const int64_t padded = kRowTile;
    const float* a = in + begin * c_in;
    if (taps != 1 || padded != rows) {
      cols.assign(static_cast<size_t>(padded * width), 0.0f);
      parallel_for(rows, std::max<int64_t>(1, 8192 / width), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          float* dst = cols.data() + r * width;
          for (int64_t j = 0; j < taps; ++j) {
            const float* src = in + (begin + r + j * dilation) * c_in;
            for (int64_t c = 0; c < c_in; ++c) dst[c * taps + j] = src[c];
          }
        }
      });
      a = cols.data();
    }
    float* dst = o + begin * c_out;
    product_rows(a, rows, padded, w, /*transpose_b=*/true, c_out, width, dst, scratch);
    add_bias_rows(dst, rows, c_out, b);
  }
}

void conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int stride, int context, Tensor& out) {
  const int64_t t_in = x.dim(0), c_in = x.dim(1), c_out = weight.dim(1), taps = weight.dim(2);
  const int64_t s = stride;
  const int64_t first_pos = context * s, end_pos = t_in * s;
  // Input t reaches positions [t * s, t * s + taps); earlier rows cannot reach first_pos.
  const int64_t first_row = std::max<int64_t>(0, (first_pos - taps + s) / s);
  const int64_t width = c_out * taps;  // one product row: [c_out][taps], weight's column order
  const float* in = x.data<float>();
  const float* w = weight.data<float>();
  float* o = out.data<float>();
  const int64_t out_rows = out.dim(0);
  for (int64_t p = 0; p < out_rows; ++p) {
    float* row = o + p * c_out;
    if (bias.defined()) {
      std::memcpy(row, bias.data<float>(), static_cast<size_t>(c_out) * sizeof(float));
    } else {
      std::memset(row, 0, static_cast<size_t>(c_out) * sizeof(float));
    }
  }
  std::vector<float> a, y, scratch;
  for (int64_t begin = first_row; begin < t_in; begin += kRowTile) {
    const int64_t rows = std::min(kRowTile, t_in - begin);
    const int64_t padded = kRowTile;
    a.assign(static_cast<size_t>(padded * c_in), 0.0f);
    std::memcpy(a.data(), in + begin * c_in, static_cast<size_t>(rows * c_in) * sizeof(float));
    y.resize(static_cast<size_t>(padded * width));
    product_rows(a.data(), padded, padded, w, /*transpose_b=*/false, width, c_in, y.data(), scratch);
    // Scatter in ascending input order per output position, so the sum of a position's
    // contributions has one order however the input was chunked.
    parallel_for(c_out, std::max<int64_t>(1, 4096 / (rows * taps)), [&](int64_t c0, int64_t c1) {
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = begin + r;
        const float* yr = y.data() + r * width;
        for (int64_t j = 0; j < taps; ++j) {
          const int64_t p = t * s + j;
          if (p < first_pos || p >= end_pos) continue;
          float* dst = o + (p - first_pos) * c_out;
          for (int64_t c = c0; c < c1; ++c) dst[c] += yr[c * taps + j];
        }
      }
    });
  }
}

}  // namespace omni::tensor::cpu
