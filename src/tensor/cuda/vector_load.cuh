// 16-byte loads of the product kernels (cuda/gemv.cu, cuda/moe.cu): a chunk of eight bfloat16/float16
// or four float32 values widened to float32, and the streaming load of a weight chunk that is read
// once (it bypasses L1, so the activation rows, which every warp reads, stay there).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace omni::tensor::cuda {

// Elements of T in a 16-byte chunk.
template <typename T>
struct Chunk {
  static constexpr int kElems = 16 / sizeof(T);
};

__device__ __forceinline__ void widen(const uint4& v, float (&f)[8], __nv_bfloat16) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(words[i] << 16);
    f[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ void widen(const uint4& v, float (&f)[8], __half) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 pair = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
    f[2 * i] = pair.x;
    f[2 * i + 1] = pair.y;
  }
}

__device__ __forceinline__ void widen(const uint4& v, float (&f)[4], float) {
  f[0] = __uint_as_float(v.x);
  f[1] = __uint_as_float(v.y);
  f[2] = __uint_as_float(v.z);
  f[3] = __uint_as_float(v.w);
}

// Predicated inside the instruction (zeros where `valid` is false) so that the loads of several
// chunks can all be issued before the first is used, without a branch between them.
__device__ __forceinline__ uint4 load_streaming(const uint4* p, bool valid) {
  uint4 v;
  asm("{\n"
      "  .reg .pred p;\n"
      "  setp.ne.b32 p, %5, 0;\n"
      "  mov.b32 %0, 0;\n"
      "  mov.b32 %1, 0;\n"
      "  mov.b32 %2, 0;\n"
      "  mov.b32 %3, 0;\n"
      "  @p ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      "}\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"(static_cast<int>(valid)));
  return v;
}

}  // namespace omni::tensor::cuda
