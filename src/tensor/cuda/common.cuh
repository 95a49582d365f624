// Device-side helpers shared by the .cu files of the CUDA backend: float32 conversion of the
// storage types, warp and block reductions, the dtype switch and the launch check.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cstdint>

#include "tensor/cuda/device.h"
#include "tensor/tensor.h"

namespace omni::tensor::cuda {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the total.
// `scratch` holds 32 floats of shared memory; the call synchronises the block twice.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < blockDim.x / 32 ? scratch[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();
  return v;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  v = warp_max(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < blockDim.x / 32 ? scratch[lane] : -FLT_MAX;
  v = warp_max(v);
  __syncthreads();
  return v;
}

// Candidate (value, index) ordering of argmax and top-k: larger value first, then lower index.
struct Candidate {
  float value;
  int32_t index;
};

__device__ __forceinline__ bool before(Candidate a, Candidate b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

__device__ __forceinline__ Candidate warp_best(Candidate c) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    Candidate other{__shfl_xor_sync(0xffffffffu, c.value, offset), __shfl_xor_sync(0xffffffffu, c.index, offset)};
    if (before(other, c)) c = other;
  }
  return c;
}

// Best over the block (blockDim.x a multiple of 32); every thread gets it. `scratch` holds 32
// Candidates of shared memory; the call synchronises the block twice.
__device__ __forceinline__ Candidate block_best(Candidate c, Candidate* scratch) {
  c = warp_best(c);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = c;
  __syncthreads();
  c = lane < blockDim.x / 32 ? scratch[lane] : Candidate{-INFINITY, INT32_MAX};
  c = warp_best(c);
  __syncthreads();
  return c;
}

// Claims the device's error record for the first invalid input value (cuda/device.h): the first
// kernel to report wins, later reports are dropped.
__device__ inline void record_error(DeviceErrorRecord* record, DeviceErrorKind kind, int64_t index, int64_t value,
                                    int64_t limit) {
  if (atomicCAS(&record->kind, 0, static_cast<int32_t>(kind)) == 0) {
    record->index = index;
    record->value = value;
    record->limit = limit;
    __threadfence_system();
  }
}

// Throws omni::Error(kInternal) naming the kernel when its launch failed.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

inline void check_launch(const char* kernel, const Tensor& on) { check(cudaGetLastError(), kernel, on.device().index); }

// Calls f(T{}) with T the storage type of a float32/bfloat16/float16 dtype.
template <typename F>
void with_float_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32:
      f(float{});
      return;
    case DType::kBF16:
      f(__nv_bfloat16{});
      return;
    case DType::kF16:
      f(__half{});
      return;
    default:
      fail_dtype(dtype);
  }
}

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.raw());
}

inline unsigned blocks_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 * 32 ? (blocks > 0 ? blocks : 1) : 65535 * 32);
}

}  // namespace omni::tensor::cuda
