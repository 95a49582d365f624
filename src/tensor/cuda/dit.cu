// The fused steps of a diffusion transformer block (tensor/dit_ops.h).
//
// modulated_rms_norm and gated_rms_norm_add: one block per row, as rms_norm's kernel
// (cuda/elementwise.cu): the sum of squares over the row, then each thread re-reads the chunks it
// summed (from L1) and writes x̂ * weight * scale, or adds ŷ * weight * gate to the residual; 16-byte
// accesses where every row is whole 16-byte vectors at aligned addresses, else one element at a time.
//
// qkv_norm_rotate: one warp per (token, part, head) of the fused product's output: for a query or
// key head the lanes take the head's pairs 32 at a time, sum their squares (a warp reduction), and
// write each pair normalised, weighted and rotated; a value head is copied.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tensor/cuda/common.cuh"
#include "tensor/cuda/dit_kernels.h"

namespace omni::tensor::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

cudaStream_t stream_of(const Tensor& t) { return stream_for(t.device().index); }

// V elements of T, loaded and stored as one access (16 bytes for V > 1).
template <typename T, int V>
struct Chunk {
  using Raw = std::conditional_t<V == 1, T, uint4>;
  static_assert(sizeof(Raw) == V * sizeof(T));
  T v[V];
  __device__ __forceinline__ static Chunk load(const T* base, int64_t index) {
    Chunk c;
    const Raw raw = reinterpret_cast<const Raw*>(base)[index];
    memcpy(c.v, &raw, sizeof raw);
    return c;
  }
  __device__ __forceinline__ void store(T* base, int64_t index) const {
    Raw raw;
    memcpy(&raw, v, sizeof raw);
    reinterpret_cast<Raw*>(base)[index] = raw;
  }
};

// kAdd false: out = x̂ * weight * vec (the modulated norm; out may be x).
// kAdd true: out += x̂ * weight * vec (the gated residual add; out is the residual, x is y).
template <typename T, int V, bool kAdd>
__global__ void dit_norm_kernel(const T* x, const T* weight, const T* vec, T* out, float eps, int64_t d) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x, chunks = d / V;
  const T* in = x + row * d;
  T* dst = out + row * d;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    const Chunk<T, V> xv = Chunk<T, V>::load(in, c);
#pragma unroll
    for (int i = 0; i < V; ++i) sum += to_float(xv.v[i]) * to_float(xv.v[i]);
  }
  sum = block_sum(sum, scratch);
  const float inv = rsqrtf(sum / static_cast<float>(d) + eps);
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    const Chunk<T, V> xv = Chunk<T, V>::load(in, c), wv = Chunk<T, V>::load(weight, c), sv = Chunk<T, V>::load(vec, c);
    Chunk<T, V> o;
    if constexpr (kAdd) o = Chunk<T, V>::load(dst, c);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float y = to_float(xv.v[i]) * inv * to_float(wv.v[i]) * to_float(sv.v[i]);
      o.v[i] = from_float<T>(kAdd ? to_float(o.v[i]) + y : y);
    }
    o.store(dst, c);
  }
}

template <bool kAdd>
void launch_dit_norm(const Tensor& x, const Tensor& weight, const Tensor& vec, Tensor& out, float eps,
                     const char* name) {
  const int64_t d = x.dim(-1);
  if (x.numel() == 0) return;
  const unsigned rows = static_cast<unsigned>(x.numel() / d);
  const bool vector = d * static_cast<int64_t>(dtype_size(x.dtype())) % 16 == 0 && aligned16(x.raw()) &&
                      aligned16(weight.raw()) && aligned16(vec.raw()) && aligned16(out.raw());
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = 16 / sizeof(T);
    if (vector) {
      const int64_t chunks = d / kVec;
      const int threads = static_cast<int>(std::min<int64_t>(1024, std::max<int64_t>(32, (chunks + 31) / 32 * 32)));
      dit_norm_kernel<T, kVec, kAdd>
          <<<rows, threads, 0, stream_of(out)>>>(ptr<T>(x), ptr<T>(weight), ptr<T>(vec), ptr<T>(out), eps, d);
    } else {
      dit_norm_kernel<T, 1, kAdd>
          <<<rows, kThreads, 0, stream_of(out)>>>(ptr<T>(x), ptr<T>(weight), ptr<T>(vec), ptr<T>(out), eps, d);
    }
  });
  check_launch(name, out);
}

template <typename T>
struct alignas(2 * sizeof(T)) Pair {
  T a, b;
};

// One warp per unit u = (t * 3 + part) * heads + h, i.e. the u-th head-sized run of qkv.
template <typename T, typename A>
__global__ void qkv_norm_rotate_kernel(const T* qkv, const T* q_norm, const T* k_norm, float eps, const A* cos,
                                       const A* sin, T* q, T* k, T* v, int tokens, int heads, int d) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t unit = int64_t{blockIdx.x} * kWarpsPerBlock + warp;
  if (unit >= int64_t{tokens} * 3 * heads) return;
  const int t = static_cast<int>(unit / (3 * heads));
  const int rem = static_cast<int>(unit - int64_t{t} * 3 * heads);
  const int part = rem / heads, h = rem - part * heads;
  const int half = d / 2;
  const auto* src = reinterpret_cast<const Pair<T>*>(qkv + unit * d);
  T* out_base = part == 0 ? q : (part == 1 ? k : v);
  auto* dst = reinterpret_cast<Pair<T>*>(out_base + (int64_t{t} * heads + h) * d);
  if (part == 2) {
    for (int p = lane; p < half; p += 32) dst[p] = src[p];
    return;
  }
  const T* norm = part == 0 ? q_norm : k_norm;
  float inv = 1.0f;
  if (norm != nullptr) {
    float sum = 0.0f;
    for (int p = lane; p < half; p += 32) {
      const Pair<T> x = src[p];
      sum += to_float(x.a) * to_float(x.a) + to_float(x.b) * to_float(x.b);
    }
    inv = rsqrtf(warp_sum(sum) / static_cast<float>(d) + eps);
  }
  const A* c_row = cos + int64_t{t} * half;
  const A* s_row = sin + int64_t{t} * half;
  for (int p = lane; p < half; p += 32) {
    const Pair<T> x = src[p];
    float re = to_float(x.a), im = to_float(x.b);
    if (norm != nullptr) {
      re *= inv * to_float(norm[2 * p]);
      im *= inv * to_float(norm[2 * p + 1]);
    }
    const float c = to_float(c_row[p]), s = to_float(s_row[p]);
    dst[p] = Pair<T>{from_float<T>(re * c - im * s), from_float<T>(re * s + im * c)};
  }
}

}  // namespace

void modulated_rms_norm(const Tensor& x, const Tensor& weight, const Tensor& scale, float eps, Tensor& out) {
  launch_dit_norm<false>(x, weight, scale, out, eps, "dit_norm_kernel (modulated)");
}

void gated_rms_norm_add(Tensor& residual, const Tensor& y, const Tensor& weight, const Tensor& gate, float eps) {
  launch_dit_norm<true>(y, weight, gate, residual, eps, "dit_norm_kernel (gated add)");
}

void qkv_norm_rotate(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps, const Tensor& cos,
                     const Tensor& sin, Tensor& q, Tensor& k, Tensor& v) {
  const int tokens = static_cast<int>(q.dim(0)), heads = static_cast<int>(q.dim(1)), d = static_cast<int>(q.dim(2));
  const int64_t units = int64_t{tokens} * 3 * heads;
  if (units == 0) return;
  const unsigned blocks = static_cast<unsigned>((units + kWarpsPerBlock - 1) / kWarpsPerBlock);
  with_float_type(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* qn = q_norm.defined() ? ptr<T>(q_norm) : nullptr;
    const T* kn = k_norm.defined() ? ptr<T>(k_norm) : nullptr;
    if (cos.dtype() == DType::kF32) {
      qkv_norm_rotate_kernel<T, float><<<blocks, kThreads, 0, stream_of(q)>>>(ptr<T>(qkv), qn, kn, eps, ptr<float>(cos),
                                                                              ptr<float>(sin), ptr<T>(q), ptr<T>(k),
                                                                              ptr<T>(v), tokens, heads, d);
    } else {
      qkv_norm_rotate_kernel<T, T><<<blocks, kThreads, 0, stream_of(q)>>>(
          ptr<T>(qkv), qn, kn, eps, ptr<T>(cos), ptr<T>(sin), ptr<T>(q), ptr<T>(k), ptr<T>(v), tokens, heads, d);
    }
  });
  check_launch("qkv_norm_rotate_kernel", q);
}

}  // namespace omni::tensor::cuda
