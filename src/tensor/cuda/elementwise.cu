// Row-wise and elementwise kernels: embedding, RMSNorm (plain and fused with the residual add),
// rotary embedding, SiLU-and-multiply, GELU, add, bias, softmax, argmax, top-k and store_kv.
#include <cstdint>

#include "tensor/cuda/common.cuh"
#include "tensor/cuda/kernels.h"

namespace omni::tensor::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void embedding_kernel(const T* table, const int32_t* ids, T* out, int64_t hidden) {
  const T* src = table + static_cast<int64_t>(ids[blockIdx.x]) * hidden;
  T* dst = out + static_cast<int64_t>(blockIdx.x) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = src[i];
}

// With `residual`: residual = x + residual (rounded to T), then out = rms_norm(residual). The
// row is read into registers-through-L1 twice; rows are at most a few thousand elements.
template <typename T>
__global__ void rms_norm_kernel(const T* x, T* residual, const T* weight, float eps, T* out, int64_t d) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* in = x + row * d;
  T* res = residual ? residual + row * d : nullptr;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    float v = to_float(in[i]);
    if (res) {
      const T r = from_float<T>(v + to_float(res[i]));
      res[i] = r;
      v = to_float(r);
    }
    sum += v * v;
  }
  sum = block_sum(sum, scratch);
  const float inv = rsqrtf(sum / static_cast<float>(d) + eps);
  const T* src = res ? res : in;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    out[row * d + i] = from_float<T>(to_float(src[i]) * inv * to_float(weight[i]));
  }
}

// Which position stream (0 = t, 1 = h, 2 = w) drives frequency slot `slot` (see ops::RopeLayout).
__device__ int stream_of_slot(int layout, int s0, int s1, int s2, int slot) {
  if (layout == static_cast<int>(ops::RopeLayout::kMropeSectioned)) {
    if (slot < s0) return 0;
    if (slot < s0 + s1) return 1;
    if (slot < s0 + s1 + s2) return 2;
    return 0;
  }
  if (layout == static_cast<int>(ops::RopeLayout::kMropeInterleaved)) {
    if (slot % 3 == 1 && slot < 3 * s1) return 1;
    if (slot % 3 == 2 && slot < 3 * s2) return 2;
  }
  return 0;
}

// One block per token; threads cover (head, frequency slot) pairs.
template <typename T>
__global__ void rotary_kernel(T* x, const int32_t* positions, int64_t tokens, int heads, int head_dim, float theta,
                              int layout, int s0, int s1, int s2) {
  const int half = head_dim / 2;
  const int64_t t = blockIdx.x;
  for (int item = threadIdx.x; item < heads * half; item += blockDim.x) {
    const int h = item / half, i = item % half;
    const int stream = stream_of_slot(layout, s0, s1, s2, i);
    const float inv_freq = 1.0f / powf(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
    const float angle = static_cast<float>(positions[stream * tokens + t]) * inv_freq;
    float sin_a, cos_a;
    sincosf(angle, &sin_a, &cos_a);
    T* v = x + (t * heads + h) * head_dim;
    const float x1 = to_float(v[i]), x2 = to_float(v[i + half]);
    v[i] = from_float<T>(x1 * cos_a - x2 * sin_a);
    v[i + half] = from_float<T>(x2 * cos_a + x1 * sin_a);
  }
}

template <typename T>
__global__ void silu_and_mul_kernel(const T* x, T* out, int64_t rows, int64_t inter) {
  const int64_t n = rows * inter;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / inter, i = e % inter;
    const float gate = to_float(x[r * 2 * inter + i]);
    const float up = to_float(x[r * 2 * inter + inter + i]);
    out[e] = from_float<T>(gate / (1.0f + expf(-gate)) * up);
  }
}

template <typename T>
__global__ void gelu_kernel(const T* x, T* out, int64_t n, bool tanh_approximation) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const float v = to_float(x[e]);
    float y;
    if (tanh_approximation) {
      y = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    } else {
      y = 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
    }
    out[e] = from_float<T>(y);
  }
}

template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    out[e] = from_float<T>(to_float(a[e]) + to_float(b[e]));
  }
}

template <typename T>
__global__ void row_bias_kernel(const T* bias, T* out, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    out[e] = from_float<T>(to_float(out[e]) + to_float(bias[e % cols]));
  }
}

template <typename T>
__global__ void softmax_kernel(const T* x, T* out, int64_t n) {
  __shared__ float scratch[32];
  const T* in = x + blockIdx.x * n;
  T* dst = out + blockIdx.x * n;
  float mx = -FLT_MAX;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, to_float(in[i]));
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += expf(to_float(in[i]) - mx);
  sum = block_sum(sum, scratch);
  const float inv = 1.0f / sum;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = from_float<T>(expf(to_float(in[i]) - mx) * inv);
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

__device__ Candidate block_best(Candidate c, Candidate* scratch) {
  c = warp_best(c);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = c;
  __syncthreads();
  c = lane < blockDim.x / 32 ? scratch[lane] : Candidate{-INFINITY, INT32_MAX};
  c = warp_best(c);
  __syncthreads();
  return c;
}

// Best element of the row that ranks after `after` (the previous pick); k passes give the top k.
template <typename T>
__global__ void top_k_kernel(const T* x, int64_t n, int k, T* values, int32_t* indices) {
  __shared__ Candidate scratch[32];
  const T* row = x + blockIdx.x * n;
  Candidate after{INFINITY, -1};
  for (int pick = 0; pick < k; ++pick) {
    Candidate best{-INFINITY, INT32_MAX};
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const Candidate c{to_float(row[i]), static_cast<int32_t>(i)};
      if (before(after, c) && before(c, best)) best = c;
    }
    best = block_best(best, scratch);
    if (threadIdx.x == 0) {
      if (values) values[blockIdx.x * int64_t{k} + pick] = from_float<T>(best.value);
      indices[blockIdx.x * int64_t{k} + pick] = best.index;
    }
    after = best;
  }
}

template <typename T>
__global__ void store_kv_kernel(const T* k, const T* v, const int32_t* slots, T* k_cache, T* v_cache, int64_t row) {
  const int64_t slot = slots[blockIdx.x];
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
    k_cache[slot * row + i] = k[blockIdx.x * row + i];
    v_cache[slot * row + i] = v[blockIdx.x * row + i];
  }
}

cudaStream_t stream_of(const Tensor& t) { return stream_for(t.device().index); }

}  // namespace

void embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  if (ids.numel() == 0) return;
  with_float_type(table.dtype(), [&](auto tag) {
    using T = decltype(tag);
    embedding_kernel<T>
        <<<ids.numel(), kThreads, 0, stream_of(out)>>>(ptr<T>(table), ptr<int32_t>(ids), ptr<T>(out), table.dim(1));
  });
  check_launch("embedding_kernel", out);
}

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  const int64_t d = x.dim(-1);
  if (x.numel() == 0) return;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    rms_norm_kernel<T>
        <<<x.numel() / d, kThreads, 0, stream_of(out)>>>(ptr<T>(x), nullptr, ptr<T>(weight), eps, ptr<T>(out), d);
  });
  check_launch("rms_norm_kernel", out);
}

void add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& weight, float eps, Tensor& out) {
  const int64_t d = x.dim(-1);
  if (x.numel() == 0) return;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    rms_norm_kernel<T><<<x.numel() / d, kThreads, 0, stream_of(out)>>>(ptr<T>(x), ptr<T>(residual), ptr<T>(weight), eps,
                                                                       ptr<T>(out), d);
  });
  check_launch("rms_norm_kernel (with residual)", out);
}

void rotary_embedding(Tensor& x, const Tensor& positions, const ops::RopeSpec& spec) {
  if (x.numel() == 0) return;
  const auto& s = spec.mrope_section;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    rotary_kernel<T><<<x.dim(0), kThreads, 0, stream_of(x)>>>(
        ptr<T>(x), ptr<int32_t>(positions), x.dim(0), static_cast<int>(x.dim(1)), static_cast<int>(x.dim(2)),
        spec.theta, static_cast<int>(spec.layout), s[0], s[1], s[2]);
  });
  check_launch("rotary_kernel", x);
}

void silu_and_mul(const Tensor& x, Tensor& out) {
  if (out.numel() == 0) return;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    silu_and_mul_kernel<T><<<blocks_for(out.numel(), kThreads), kThreads, 0, stream_of(out)>>>(ptr<T>(x), ptr<T>(out),
                                                                                               out.dim(0), out.dim(1));
  });
  check_launch("silu_and_mul_kernel", out);
}

void gelu(const Tensor& x, ops::GeluApproximation approximation, Tensor& out) {
  if (out.numel() == 0) return;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    gelu_kernel<T><<<blocks_for(out.numel(), kThreads), kThreads, 0, stream_of(out)>>>(
        ptr<T>(x), ptr<T>(out), out.numel(), approximation == ops::GeluApproximation::kTanh);
  });
  check_launch("gelu_kernel", out);
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  if (out.numel() == 0) return;
  with_float_type(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    add_kernel<T><<<blocks_for(out.numel(), kThreads), kThreads, 0, stream_of(out)>>>(ptr<T>(a), ptr<T>(b), ptr<T>(out),
                                                                                      out.numel());
  });
  check_launch("add_kernel", out);
}

void add_row_bias(const Tensor& bias, Tensor& out) {
  if (out.numel() == 0) return;
  with_float_type(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    row_bias_kernel<T><<<blocks_for(out.numel(), kThreads), kThreads, 0, stream_of(out)>>>(ptr<T>(bias), ptr<T>(out),
                                                                                           out.dim(0), out.dim(1));
  });
  check_launch("row_bias_kernel", out);
}

void softmax(const Tensor& x, Tensor& out) {
  if (x.dim(0) == 0) return;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    softmax_kernel<T><<<x.dim(0), kThreads, 0, stream_of(out)>>>(ptr<T>(x), ptr<T>(out), x.dim(1));
  });
  check_launch("softmax_kernel", out);
}

void argmax(const Tensor& x, Tensor& out) {
  if (x.dim(0) == 0) return;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    top_k_kernel<T><<<x.dim(0), kThreads, 0, stream_of(out)>>>(ptr<T>(x), x.dim(1), 1, static_cast<T*>(nullptr),
                                                               ptr<int32_t>(out));
  });
  check_launch("top_k_kernel (argmax)", out);
}

void top_k(const Tensor& x, int k, Tensor& values, Tensor& indices) {
  if (x.dim(0) == 0) return;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    top_k_kernel<T>
        <<<x.dim(0), kThreads, 0, stream_of(values)>>>(ptr<T>(x), x.dim(1), k, ptr<T>(values), ptr<int32_t>(indices));
  });
  check_launch("top_k_kernel", values);
}

void store_kv(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_cache, Tensor& v_cache) {
  if (k.dim(0) == 0) return;
  with_float_type(k.dtype(), [&](auto tag) {
    using T = decltype(tag);
    store_kv_kernel<T><<<k.dim(0), 128, 0, stream_of(k_cache)>>>(ptr<T>(k), ptr<T>(v), ptr<int32_t>(slots),
                                                                 ptr<T>(k_cache), ptr<T>(v_cache), k.dim(1) * k.dim(2));
  });
  check_launch("store_kv_kernel", k_cache);
}

}  // namespace omni::tensor::cuda
