// Convolutions along time (time-major activations) for the audio decoders.
//
// Their matrix products go through gemm (gemm.h), whose every output element is one fma chain in
// a fixed order: a row's result depends only on its own input rows, so a stream decoded in chunks
// equals the one-shot decode bit for bit on any CPU. tests/tensor/ops_test.cc checks it.
#include <algorithm>
#include <cstring>
#include <vector>

#include "tensor/cpu/gemm.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/thread_pool.h"

namespace omni::tensor::cpu {

namespace {

// Floats of scratch (im2col rows, product rows) a convolution takes at a time; its rows are
// independent, so how many go together changes no bit.
constexpr int64_t kScratchFloats = int64_t{1} << 21;

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
  float* o = out.data<float>();
  // A weight row is contiguous over (channel, tap), so each output's chain runs in that order and
  // b is the transpose of the row-major weight [c_out, width] (the fast packing of gemm.cc). With
  // one tap, x itself is the im2col matrix; else it is built a tile of rows at a time.
  GemmOperands op;
  op.b = weight.data<float>();
  op.b_k = 1;
  op.b_n = width;
  op.lda = width;
  op.ldc = c_out;
  if (taps == 1) {
    op.a = in;
    op.c = o;
    gemm(t_out, c_out, c_in, op, /*accumulate=*/false);
  } else {
    const int64_t tile = std::max<int64_t>(192, kScratchFloats / width);
    std::vector<float> cols;
    for (int64_t begin = 0; begin < t_out; begin += tile) {
      const int64_t rows = std::min(tile, t_out - begin);
      cols.resize(static_cast<size_t>(rows * width));
      parallel_for(rows, std::max<int64_t>(1, 8192 / width), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          float* dst = cols.data() + r * width;
          for (int64_t j = 0; j < taps; ++j) {
            const float* src = in + (begin + r + j * dilation) * c_in;
            for (int64_t c = 0; c < c_in; ++c) dst[c * taps + j] = src[c];
          }
        }
      });
      op.a = cols.data();
      op.c = o + begin * c_out;
      gemm(rows, c_out, width, op, /*accumulate=*/false);
    }
  }
  add_bias_rows(o, t_out, c_out, bias.defined() ? bias.data<float>() : nullptr);
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
  const int64_t tile = std::max<int64_t>(16, kScratchFloats / width);
  std::vector<float> y;
  GemmOperands op;
  op.lda = c_in;
  op.b = w;
  op.b_k = width;
  op.b_n = 1;
  op.ldc = width;
  for (int64_t begin = first_row; begin < t_in; begin += tile) {
    const int64_t rows = std::min(tile, t_in - begin);
    y.resize(static_cast<size_t>(rows * width));
    op.a = in + begin * c_in;
    op.c = y.data();
    gemm(rows, width, c_in, op, /*accumulate=*/false);
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
