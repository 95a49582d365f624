// prepend_history on CUDA (tensor/ops.h): one kernel lays out every stream's [history; new rows]
// segment, a second copies each segment's last h rows back into the stream's history. Two kernels
// because a history is read by the first and overwritten by the second (a stream with fewer new
// rows than h keeps part of its old history, shifted). The histories' addresses go to the device
// with the row offsets, through pinned staging memory, in one upload.
#include <cstdint>
#include <vector>

#include "tensor/cuda/common.cuh"
#include "tensor/cuda/kernels.h"

namespace omni::tensor::cuda {
namespace {

constexpr int kThreads = 256;

// table: [0, S] the streams' first rows in x (S + 1 of them), then S history addresses.
__device__ __forceinline__ int stream_of_row(const int64_t* in_start, int streams, int64_t h, int64_t out_row) {
  // Stream s's segment of out starts at in_start[s] + s * h.
  int lo = 0, hi = streams - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (in_start[mid] + mid * h <= out_row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

template <typename T>
__global__ void gather_kernel(const T* x, T* out, const int64_t* table, int streams, int64_t h, int64_t rows,
                              int channels) {
  const int64_t* in_start = table;
  const auto* histories = reinterpret_cast<const T* const*>(table + streams + 1);
  const int64_t total = rows * channels;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = idx / channels;
    const int c = static_cast<int>(idx - row * channels);
    const int s = stream_of_row(in_start, streams, h, row);
    const int64_t local = row - (in_start[s] + s * h);
    out[idx] = local < h ? histories[s][local * channels + c] : x[(in_start[s] + local - h) * channels + c];
  }
}

template <typename T>
__global__ void keep_tail_kernel(const T* out, const int64_t* table, int streams, int64_t h, int channels) {
  const int64_t* in_start = table;
  auto* const* histories = reinterpret_cast<T* const*>(table + streams + 1);
  const int64_t per_stream = h * channels;
  const int64_t total = per_stream * streams;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int s = static_cast<int>(idx / per_stream);
    const int64_t within = idx - s * per_stream;
    // The segment of stream s ends at in_start[s + 1] + (s + 1) * h.
    const int64_t tail = in_start[s + 1] + (s + 1) * h - h;
    histories[s][within] = out[tail * channels + within];
  }
}

}  // namespace

void prepend_history(const Tensor& x, std::span<const int64_t> rows, std::span<Tensor> histories, Tensor& out) {
  const int64_t h = histories[0].dim(0), channels = x.dim(1);
  if (out.numel() == 0) return;
  const int streams = static_cast<int>(rows.size());
  std::vector<int64_t> table{0};
  for (const int64_t r : rows) table.push_back(table.back() + r);
  for (const Tensor& history : histories)
    table.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(history.raw())));
  const int device = out.device().index;
  Tensor on_device = Tensor::empty({static_cast<int64_t>(table.size())}, DType::kI64, out.device());
  upload_async(on_device.raw(), table.data(), table.size() * sizeof(int64_t), device);
  const auto* meta = static_cast<const int64_t*>(on_device.raw());
  cudaStream_t stream = stream_for(device);
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    gather_kernel<T><<<blocks_for(out.numel(), kThreads), kThreads, 0, stream>>>(
        ptr<T>(x), ptr<T>(out), meta, streams, h, out.dim(0), static_cast<int>(channels));
    check_launch("prepend_history gather_kernel", out);
    if (h > 0) {
      keep_tail_kernel<T><<<blocks_for(h * channels * streams, kThreads), kThreads, 0, stream>>>(
          ptr<T>(out), meta, streams, h, static_cast<int>(channels));
      check_launch("prepend_history keep_tail_kernel", out);
    }
  });
}

}  // namespace omni::tensor::cuda
