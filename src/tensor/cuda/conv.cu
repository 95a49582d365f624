// Convolutions along time for the audio decoders (tensor/ops.h), over packed segments.
//
// conv1d (groups 1): the rows of a segment's output are one matrix product with the weight viewed
// as [C_out, C_in * k] (its PyTorch layout, untouched), against an unfolded input whose row t holds
// x[t + j * dilation, i] at column i * k + j. The unfolding kernel maps each output row to its
// segment, so the product runs over all segments at once and no row spans two of them; the unfolded
// rows are built in tiles of bounded size (a k = 7 layer at 96 channels would otherwise take 7x its
// input). k = 1 needs no unfolding. Depthwise convolutions are one kernel (k taps per element).
//
// conv_transpose1d: y = x @ weight viewed as [C_in, C_out * k] gives every input row's k output
// taps; a gather kernel then sums, per output position of a segment, the taps of that segment's
// input rows that reach it, in ascending input order (as the CPU does), and adds the bias. The
// products run over groups of whole segments whose y stays within a bounded size.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "tensor/cuda/common.cuh"
#include "tensor/cuda/kernels.h"

namespace omni::tensor::cuda {
namespace {

constexpr int kThreads = 256;
// Elements of unfolded input or transposed-convolution taps held at once (256 MiB of float32).
constexpr int64_t kScratchElements = int64_t{64} << 20;

cudaStream_t stream_of(const Tensor& t) { return stream_for(t.device().index); }

// Where each segment starts in the input and in the output, as one device array:
// [0, S] output starts (S + 1 of them), then [S + 1, 2S + 1] input starts.
struct SegmentTable {
  Tensor device;  // int64 [2 * (S + 1)]
  int segments = 0;
  const int64_t* out_start() const { return static_cast<const int64_t*>(device.raw()); }
  const int64_t* in_start() const { return out_start() + segments + 1; }
};

SegmentTable upload_segments(const std::vector<int64_t>& out_start, const std::vector<int64_t>& in_start,
                             const Tensor& on) {
  std::vector<int64_t> packed(out_start);
  packed.insert(packed.end(), in_start.begin(), in_start.end());
  SegmentTable table;
  table.segments = static_cast<int>(out_start.size()) - 1;
  table.device = Tensor::empty({static_cast<int64_t>(packed.size())}, DType::kI64, on.device());
  upload_async(table.device.raw(), packed.data(), packed.size() * sizeof(int64_t), on.device().index);
  return table;
}

// The segment whose output rows [out_start[s], out_start[s + 1]) hold `row`.
__device__ __forceinline__ int segment_of(const int64_t* out_start, int segments, int64_t row) {
  int lo = 0, hi = segments - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (out_start[mid] <= row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// cols[r - row_begin, i * k + j] = x[in_start[s] + (r - out_start[s]) + j * dilation, i] for the
// output rows r in [row_begin, row_begin + rows). Threads run along i, so the reads of x coalesce.
template <typename T>
__global__ void unfold_kernel(const T* x, T* cols, const int64_t* out_start, const int64_t* in_start, int segments,
                              int64_t row_begin, int64_t rows, int c_in, int k, int dilation) {
  const int64_t per_row = int64_t{c_in} * k;
  const int64_t total = rows * per_row;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = idx / per_row;
    const int64_t rem = idx - r * per_row;
    const int j = static_cast<int>(rem / c_in), i = static_cast<int>(rem - int64_t{j} * c_in);
    const int64_t row = row_begin + r;
    const int s = segment_of(out_start, segments, row);
    const int64_t src = in_start[s] + (row - out_start[s]) + int64_t{j} * dilation;
    cols[r * per_row + int64_t{i} * k + j] = x[src * c_in + i];
  }
}

template <typename T>
__global__ void depthwise_kernel(const T* x, const T* weight, const T* bias, T* out, const int64_t* out_start,
                                 const int64_t* in_start, int segments, int64_t rows, int channels, int k,
                                 int dilation) {
  const int64_t total = rows * channels;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = idx / channels;
    const int c = static_cast<int>(idx - row * channels);
    const int s = segment_of(out_start, segments, row);
    const T* src = x + (in_start[s] + (row - out_start[s])) * channels + c;
    float acc = 0.0f;
    for (int j = 0; j < k; ++j) acc += to_float(weight[c * k + j]) * to_float(src[int64_t{j} * dilation * channels]);
    out[idx] = from_float<T>(bias != nullptr ? acc + to_float(bias[c]) : acc);
  }
}

// out[p, c] = bias[c] + sum over the input rows t of p's segment with t * stride <= q < t * stride
// + k (q = p's position in its segment, counted from the segment's first input row) of
// y[t, c * k + q - t * stride]. y's rows are those of the group, from in_start.
template <typename T>
__global__ void overlap_add_kernel(const T* y, const T* bias, T* out, const int64_t* out_start, const int64_t* in_start,
                                   int segments, int64_t rows, int c_out, int k, int stride, int context) {
  const int64_t total = rows * c_out;
  const int64_t width = int64_t{c_out} * k;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = idx / c_out;
    const int c = static_cast<int>(idx - row * c_out);
    const int s = segment_of(out_start, segments, row);
    const int64_t q = int64_t{context} * stride + (row - out_start[s]);
    const int64_t seg_rows = in_start[s + 1] - in_start[s];
    const int64_t first = q - k + 1 <= 0 ? 0 : (q - k + stride) / stride;
    const int64_t last = seg_rows - 1 < q / stride ? seg_rows - 1 : q / stride;
    float acc = 0.0f;
    for (int64_t t = first; t <= last; ++t) {
      acc += to_float(y[(in_start[s] + t) * width + int64_t{c} * k + (q - t * stride)]);
    }
    out[idx] = from_float<T>(bias != nullptr ? acc + to_float(bias[c]) : acc);
  }
}

}  // namespace

void conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int dilation, int groups,
            std::span<const int64_t> segments, Tensor& out) {
  const int64_t rows = out.dim(0), c_in = x.dim(1), c_out = out.dim(1), k = weight.dim(2);
  if (rows == 0 || c_out == 0) return;
  const int64_t span = (k - 1) * dilation;
  if (groups == 1 && k == 1) {
    linear(x, weight.reshape({c_out, c_in}), bias, out);
    return;
  }
  std::vector<int64_t> out_start{0}, in_start{0};
  for (const int64_t seg : segments) {
    out_start.push_back(out_start.back() + seg - span);
    in_start.push_back(in_start.back() + seg);
  }
  const SegmentTable table = upload_segments(out_start, in_start, out);
  cudaStream_t stream = stream_of(out);
  if (groups != 1) {
    with_float_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      depthwise_kernel<T><<<blocks_for(rows * c_out, kThreads), kThreads, 0, stream>>>(
          ptr<T>(x), ptr<T>(weight), bias.defined() ? ptr<T>(bias) : nullptr, ptr<T>(out), table.out_start(),
          table.in_start(), table.segments, rows, static_cast<int>(c_out), static_cast<int>(k), dilation);
    });
    check_launch("depthwise_kernel", out);
    return;
  }
  const int64_t width = c_in * k;
  const int64_t tile = std::max<int64_t>(1, std::min(rows, kScratchElements / width));
  Tensor cols = Tensor::empty({tile, width}, x.dtype(), x.device());
  const Tensor flat = weight.reshape({c_out, width});
  for (int64_t begin = 0; begin < rows; begin += tile) {
    const int64_t n = std::min(tile, rows - begin);
    Tensor unfolded = cols.slice_rows(0, n);
    with_float_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      unfold_kernel<T><<<blocks_for(n * width, kThreads), kThreads, 0, stream>>>(
          ptr<T>(x), ptr<T>(unfolded), table.out_start(), table.in_start(), table.segments, begin, n,
          static_cast<int>(c_in), static_cast<int>(k), dilation);
    });
    check_launch("unfold_kernel", out);
    Tensor dst = out.slice_rows(begin, begin + n);
    linear(unfolded, flat, bias, dst);
  }
}

void conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int stride, int context,
                      std::span<const int64_t> segments, Tensor& out) {
  const int64_t c_in = x.dim(1), c_out = weight.dim(1), k = weight.dim(2);
  if (out.numel() == 0) return;
  const int64_t width = c_out * k;
  const Tensor flat = weight.reshape({c_in, width});
  cudaStream_t stream = stream_of(out);
  // Groups of whole segments, each product at most kScratchElements (or one segment) large.
  size_t first = 0;
  int64_t in_at = 0, out_at = 0;
  while (first < segments.size()) {
    size_t end = first + 1;
    int64_t group_rows = segments[first];
    while (end < segments.size() && (group_rows + segments[end]) * width <= kScratchElements) {
      group_rows += segments[end++];
    }
    std::vector<int64_t> out_start{0}, in_start{0};
    for (size_t s = first; s < end; ++s) {
      out_start.push_back(out_start.back() + (segments[s] - context) * stride);
      in_start.push_back(in_start.back() + segments[s]);
    }
    const int64_t group_out = out_start.back();
    if (group_out > 0) {
      Tensor y = Tensor::empty({group_rows, width}, x.dtype(), x.device());
      matmul(x.slice_rows(in_at, in_at + group_rows), flat, /*transpose_b=*/false, y);
      const SegmentTable table = upload_segments(out_start, in_start, out);
      Tensor dst = out.slice_rows(out_at, out_at + group_out);
      with_float_type(x.dtype(), [&](auto tag) {
        using T = decltype(tag);
        overlap_add_kernel<T><<<blocks_for(group_out * c_out, kThreads), kThreads, 0, stream>>>(
            ptr<T>(y), bias.defined() ? ptr<T>(bias) : nullptr, ptr<T>(dst), table.out_start(), table.in_start(),
            table.segments, group_out, static_cast<int>(c_out), static_cast<int>(k), stride, context);
      });
      check_launch("overlap_add_kernel", out);
    }
    in_at += group_rows;
    out_at += group_out;
    first = end;
  }
}

}  // namespace omni::tensor::cuda
