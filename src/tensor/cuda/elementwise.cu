// Row-wise and elementwise kernels: embedding, RMSNorm (plain and fused with the residual add),
// rotary embedding, SiLU-and-multiply, GELU, add, bias, softmax, argmax, top-k, store_kv and
// qkv_norm_rope_store (q/k norm, RoPE and store_kv in one kernel).
#include <algorithm>
#include <cstdint>

#include "tensor/cuda/common.cuh"
#include "tensor/cuda/kernels.h"

namespace omni::tensor::cuda {
namespace {

constexpr int kThreads = 256;

// Copies `bytes` (a multiple of 16 when both rows are 16-byte aligned) with 16-byte accesses.
__device__ __forceinline__ void copy_row(const char* src, char* dst, int64_t bytes, bool vector) {
  if (vector) {
    const auto* s = reinterpret_cast<const uint4*>(src);
    auto* d = reinterpret_cast<uint4*>(dst);
    for (int64_t i = threadIdx.x; i < bytes / 16; i += blockDim.x) d[i] = __ldg(s + i);
  } else {
    for (int64_t i = threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
  }
}

// One block per token; an id outside [0, vocab) is recorded and its row zeroed.
__global__ void embedding_kernel(const char* table, const int32_t* ids, char* out, int64_t row_bytes, int64_t vocab,
                                 bool vector, DeviceErrorRecord* errors) {
  const int32_t id = ids[blockIdx.x];
  char* dst = out + blockIdx.x * row_bytes;
  if (id < 0 || id >= vocab) {
    if (threadIdx.x == 0) record_error(errors, DeviceErrorKind::kTokenId, blockIdx.x, id, vocab);
    for (int64_t i = threadIdx.x; i < row_bytes; i += blockDim.x) dst[i] = 0;
    return;
  }
  copy_row(table + static_cast<int64_t>(id) * row_bytes, dst, row_bytes, vector);
}

// One thread per output element; a device-resident index outside [0, rows) adds nothing.
template <typename T>
__global__ void gather_weighted_sum_kernel(const T* src, const int32_t* index, const T* weights, T* out, int64_t rows,
                                           int64_t tokens, int64_t hidden, int k) {
  const int64_t n = tokens * hidden;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = e / hidden, h = e % hidden;
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) {
      const int32_t r = index[t * k + j];
      if (r >= 0 && r < rows) sum += to_float(weights[t * k + j]) * to_float(src[r * hidden + h]);
    }
    out[e] = from_float<T>(sum);
  }
}

__global__ void substitute_ids_kernel(const int32_t* source, int64_t sources, const int32_t* rows, int32_t* ids,
                                      int64_t n) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= n) return;
  const int32_t row = rows[t];
  if (row >= 0 && row < sources) ids[t] = source[row];
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

// rms_norm_kernel with 16-byte accesses, for rows of whole vectors at 16-byte aligned addresses.
template <typename T>
__global__ void rms_norm_vector_kernel(const T* x, T* residual, const T* weight, float eps, T* out, int64_t d) {
  constexpr int kVec = 16 / sizeof(T);
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x, chunks = d / kVec;
  const auto* in = reinterpret_cast<const uint4*>(x + row * d);
  auto* res = residual ? reinterpret_cast<uint4*>(residual + row * d) : nullptr;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    uint4 raw = in[c];
    T v[kVec];
    memcpy(v, &raw, sizeof raw);
    if (res) {
      const uint4 r_raw = res[c];
      T r[kVec];
      memcpy(r, &r_raw, sizeof r_raw);
#pragma unroll
      for (int i = 0; i < kVec; ++i) v[i] = from_float<T>(to_float(v[i]) + to_float(r[i]));
      memcpy(&raw, v, sizeof raw);
      res[c] = raw;
    }
#pragma unroll
    for (int i = 0; i < kVec; ++i) sum += to_float(v[i]) * to_float(v[i]);
  }
  sum = block_sum(sum, scratch);
  const float inv = rsqrtf(sum / static_cast<float>(d) + eps);
  // Each thread re-reads only the chunks it wrote (or read) above.
  const uint4* src = res ? res : in;
  const auto* w = reinterpret_cast<const uint4*>(weight);
  auto* dst = reinterpret_cast<uint4*>(out + row * d);
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    const uint4 raw = src[c], w_raw = __ldg(w + c);
    T v[kVec], wv[kVec], o[kVec];
    memcpy(v, &raw, sizeof raw);
    memcpy(wv, &w_raw, sizeof w_raw);
#pragma unroll
    for (int i = 0; i < kVec; ++i) o[i] = from_float<T>(to_float(v[i]) * inv * to_float(wv[i]));
    uint4 o_raw;
    memcpy(&o_raw, o, sizeof o_raw);
    dst[c] = o_raw;
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

// One block per token; threads cover (head, frequency slot) pairs. Positions are int32, or float32
// (fractional M-RoPE positions), either read as float32.
template <typename T, typename P>
__global__ void rotary_kernel(T* x, const P* positions, int64_t tokens, int heads, int head_dim, float theta,
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

// One warp normalises (when `w` is given: RMS over the head, times w) and rotates (NeoX pairs
// (i, i + D/2) at `position`) one head of `head_dim` values from `src` into `dst` (which may be
// `src`: each lane reads its pairs before writing them). The sum of squares is a warp reduction, so
// every lane of the warp must call it.
template <typename T>
__device__ void norm_rope_head(const T* src, T* dst, const T* w, float eps, float position, float theta, int head_dim,
                               int lane) {
  const int half = head_dim / 2;
  float inv = 1.0f;
  if (w != nullptr) {
    float sum = 0.0f;
    for (int i = lane; i < head_dim; i += 32) {
      const float x = to_float(src[i]);
      sum += x * x;
    }
    inv = rsqrtf(warp_sum(sum) / static_cast<float>(head_dim) + eps);
  }
  for (int i = lane; i < half; i += 32) {
    float x1 = to_float(src[i]) * inv, x2 = to_float(src[i + half]) * inv;
    if (w != nullptr) {
      x1 *= to_float(w[i]);
      x2 *= to_float(w[i + half]);
    }
    const float inv_freq = 1.0f / powf(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
    float sin_a, cos_a;
    sincosf(position * inv_freq, &sin_a, &cos_a);
    dst[i] = from_float<T>(x1 * cos_a - x2 * sin_a);
    dst[i + half] = from_float<T>(x2 * cos_a + x1 * sin_a);
  }
}

// The heads of a token are spread over blockIdx.y as well as over the warps of a block, so that a
// step of one token still fills many multiprocessors: head h of token blockIdx.x is taken by warp
// h % warps of block h / warps (warps = blockDim.x / 32).
__device__ inline int first_head() { return blockIdx.y * (blockDim.x / 32) + threadIdx.x / 32; }
__device__ inline int head_stride() { return gridDim.y * (blockDim.x / 32); }

// The launch shape of a per-head kernel over `tokens` tokens of `heads` heads each.
struct HeadGrid {
  dim3 blocks;
  int threads;
};
HeadGrid head_grid(int64_t tokens, int heads) {
  const int warps = std::min(4, heads);
  return {dim3(static_cast<unsigned>(tokens), static_cast<unsigned>((heads + warps - 1) / warps)), 32 * warps};
}

// q/k norm and RoPE in place: one warp per head (q heads, then k heads), as norm_rope_head.
template <typename T>
__global__ void qk_norm_rope_kernel(T* q, T* k, const T* q_norm, const T* k_norm, float eps, const int32_t* positions,
                                    int heads, int kv_heads, int head_dim, float theta) {
  const int lane = threadIdx.x % 32;
  const float position = static_cast<float>(positions[blockIdx.x]);
  for (int h = first_head(); h < heads + kv_heads; h += head_stride()) {
    const bool is_q = h < heads;
    T* v = is_q ? q + (static_cast<int64_t>(blockIdx.x) * heads + h) * head_dim
                : k + (static_cast<int64_t>(blockIdx.x) * kv_heads + (h - heads)) * head_dim;
    norm_rope_head(v, v, is_q ? q_norm : k_norm, eps, position, theta, head_dim, lane);
  }
}

// qk_norm_rope_kernel and store_kv_kernel in one pass over the fused projection: one warp per head
// (query, key, then value heads). A query or key head is normalised and rotated in registers and
// written once, to q_out or the key cache; a value head is copied. A padding row (negative slot)
// writes only q_out; a slot outside the cache is recorded and writes no K/V.
template <typename T>
__global__ void qkv_norm_rope_store_kernel(const T* qkv, const T* q_norm, const T* k_norm, float eps,
                                           const int32_t* positions, float theta, const int32_t* slots, T* q_out,
                                           T* k_cache, T* v_cache, int heads, int kv_heads, int head_dim,
                                           int64_t capacity, DeviceErrorRecord* errors) {
  const int lane = threadIdx.x % 32;
  const int all_heads = heads + 2 * kv_heads;
  const int64_t token = blockIdx.x, slot = slots[token];
  if (slot >= capacity && blockIdx.y == 0 && threadIdx.x == 0) {
    record_error(errors, DeviceErrorKind::kFusedKvSlot, token, slot, capacity);
  }
  const bool store = slot >= 0 && slot < capacity;
  const float position = static_cast<float>(positions[token]);
  const T* row = qkv + token * all_heads * head_dim;
  // Each warp takes whole heads, so the branches below are uniform across its lanes.
  for (int h = first_head(); h < (store ? all_heads : heads); h += head_stride()) {
    const T* src = row + static_cast<int64_t>(h) * head_dim;
    if (h >= heads + kv_heads) {
      T* dst = v_cache + (slot * kv_heads + (h - heads - kv_heads)) * head_dim;
      for (int i = lane; i < head_dim; i += 32) dst[i] = src[i];
      continue;
    }
    const bool is_q = h < heads;
    T* dst = is_q ? q_out + (token * heads + h) * head_dim : k_cache + (slot * kv_heads + (h - heads)) * head_dim;
    norm_rope_head(src, dst, is_q ? q_norm : k_norm, eps, position, theta, head_dim, lane);
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

// silu_and_mul_kernel with 16-byte accesses, for rows of whole vectors at 16-byte aligned addresses.
template <typename T>
__global__ void silu_and_mul_vector_kernel(const T* x, T* out, int64_t rows, int64_t inter) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t per_row = inter / kVec, n = rows * per_row;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / per_row, c = (e % per_row) * kVec;
    const uint4 g_raw = __ldg(reinterpret_cast<const uint4*>(x + r * 2 * inter + c));
    const uint4 u_raw = __ldg(reinterpret_cast<const uint4*>(x + r * 2 * inter + inter + c));
    T g[kVec], u[kVec], o[kVec];
    memcpy(g, &g_raw, sizeof g_raw);
    memcpy(u, &u_raw, sizeof u_raw);
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float gate = to_float(g[i]);
      o[i] = from_float<T>(gate / (1.0f + expf(-gate)) * to_float(u[i]));
    }
    uint4 o_raw;
    memcpy(&o_raw, o, sizeof o_raw);
    *reinterpret_cast<uint4*>(out + r * inter + c) = o_raw;
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

// One block per token; a slot outside the cache is recorded and not written.
__global__ void store_kv_kernel(const char* k, const char* v, const int32_t* slots, char* k_cache, char* v_cache,
                                int64_t row_bytes, int64_t capacity, bool vector, DeviceErrorRecord* errors) {
  const int64_t slot = slots[blockIdx.x];
  if (slot < 0) return;  // a padding row of a fixed-size step (ops.h)
  if (slot >= capacity) {
    if (threadIdx.x == 0) record_error(errors, DeviceErrorKind::kKvSlot, blockIdx.x, slot, capacity);
    return;
  }
  copy_row(k + blockIdx.x * row_bytes, k_cache + slot * row_bytes, row_bytes, vector);
  copy_row(v + blockIdx.x * row_bytes, v_cache + slot * row_bytes, row_bytes, vector);
}

cudaStream_t stream_of(const Tensor& t) { return stream_for(t.device().index); }

// Queues rms_norm_kernel, or its vector form when every row is whole 16-byte vectors.
void launch_rms_norm(const Tensor& x, Tensor* residual, const Tensor& weight, float eps, Tensor& out) {
  const int64_t d = x.dim(-1);
  if (x.numel() == 0) return;
  const bool vector = d * static_cast<int64_t>(dtype_size(x.dtype())) % 16 == 0 && aligned16(x.raw()) &&
                      aligned16(weight.raw()) && aligned16(out.raw()) && (!residual || aligned16(residual->raw()));
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* res = residual ? ptr<T>(*residual) : nullptr;
    if (vector) {
      const int chunks = static_cast<int>(d / (16 / sizeof(T)));
      const int threads = std::clamp((chunks + 31) / 32 * 32, 32, 1024);
      rms_norm_vector_kernel<T>
          <<<x.numel() / d, threads, 0, stream_of(out)>>>(ptr<T>(x), res, ptr<T>(weight), eps, ptr<T>(out), d);
    } else {
      rms_norm_kernel<T>
          <<<x.numel() / d, kThreads, 0, stream_of(out)>>>(ptr<T>(x), res, ptr<T>(weight), eps, ptr<T>(out), d);
    }
  });
  check_launch(residual ? "rms_norm_kernel (with residual)" : "rms_norm_kernel", out);
}

}  // namespace

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  launch_rms_norm(x, nullptr, weight, eps, out);
}

void add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& weight, float eps, Tensor& out) {
  launch_rms_norm(x, &residual, weight, eps, out);
}

void embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  if (ids.numel() == 0) return;
  const int64_t row_bytes = table.dim(1) * static_cast<int64_t>(dtype_size(table.dtype()));
  const bool vector = row_bytes % 16 == 0 && aligned16(table.raw()) && aligned16(out.raw());
  embedding_kernel<<<ids.numel(), 128, 0, stream_of(out)>>>(ptr<char>(table), ptr<int32_t>(ids), ptr<char>(out),
                                                            row_bytes, table.dim(0), vector,
                                                            device_error_record(out.device().index));
  check_launch("embedding_kernel", out);
}

void gather_weighted_sum(const Tensor& src, const Tensor& index, const Tensor& weights, Tensor& out) {
  if (out.numel() == 0) return;
  with_float_type(src.dtype(), [&](auto tag) {
    using T = decltype(tag);
    gather_weighted_sum_kernel<T><<<blocks_for(out.numel(), kThreads), kThreads, 0, stream_of(out)>>>(
        ptr<T>(src), ptr<int32_t>(index), ptr<T>(weights), ptr<T>(out), src.dim(0), out.dim(0), out.dim(1),
        static_cast<int>(index.dim(1)));
  });
  check_launch("gather_weighted_sum_kernel", out);
}

void substitute_ids(const Tensor& source, const Tensor& rows, Tensor& ids) {
  const int64_t n = ids.numel();
  if (n == 0) return;
  substitute_ids_kernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, stream_of(ids)>>>(
      ptr<int32_t>(source), source.numel(), ptr<int32_t>(rows), ptr<int32_t>(ids), n);
  check_launch("substitute_ids_kernel", ids);
}

void rotary_embedding(Tensor& x, const Tensor& positions, const ops::RopeSpec& spec) {
  if (x.numel() == 0) return;
  const auto& s = spec.mrope_section;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const auto launch = [&](const auto* p) {
      rotary_kernel<<<x.dim(0), kThreads, 0, stream_of(x)>>>(ptr<T>(x), p, x.dim(0), static_cast<int>(x.dim(1)),
                                                          static_cast<int>(x.dim(2)), spec.theta,
                                                          static_cast<int>(spec.layout), s[0], s[1], s[2]);
    };
    if (positions.dtype() == DType::kF32) {
      launch(ptr<float>(positions));
    } else {
      launch(ptr<int32_t>(positions));
    }
  });
  check_launch("rotary_kernel", x);
}

void qk_norm_rope(Tensor& q, Tensor& k, const Tensor& q_norm, const Tensor& k_norm, float eps, const Tensor& positions,
                  float theta) {
  const int heads = static_cast<int>(q.dim(1)), kv_heads = static_cast<int>(k.dim(1));
  if (q.dim(0) == 0 || heads + kv_heads == 0) return;
  const HeadGrid grid = head_grid(q.dim(0), heads + kv_heads);
  with_float_type(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    qk_norm_rope_kernel<T><<<grid.blocks, grid.threads, 0, stream_of(q)>>>(
        ptr<T>(q), ptr<T>(k), q_norm.defined() ? ptr<T>(q_norm) : nullptr, k_norm.defined() ? ptr<T>(k_norm) : nullptr,
        eps, ptr<int32_t>(positions), heads, kv_heads, static_cast<int>(q.dim(2)), theta);
  });
  check_launch("qk_norm_rope_kernel", q);
}

void qkv_norm_rope_store(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps,
                         const Tensor& positions, float theta, const Tensor& slots, Tensor& q_out, Tensor& k_cache,
                         Tensor& v_cache) {
  const int heads = static_cast<int>(q_out.dim(1)), kv_heads = static_cast<int>(k_cache.dim(2));
  if (qkv.dim(0) == 0 || heads + 2 * kv_heads == 0) return;
  const HeadGrid grid = head_grid(qkv.dim(0), heads + 2 * kv_heads);
  with_float_type(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    qkv_norm_rope_store_kernel<T><<<grid.blocks, grid.threads, 0, stream_of(q_out)>>>(
        ptr<T>(qkv), q_norm.defined() ? ptr<T>(q_norm) : nullptr, k_norm.defined() ? ptr<T>(k_norm) : nullptr, eps,
        ptr<int32_t>(positions), theta, ptr<int32_t>(slots), ptr<T>(q_out), ptr<T>(k_cache), ptr<T>(v_cache), heads,
        kv_heads, static_cast<int>(qkv.dim(2)), k_cache.dim(0) * k_cache.dim(1),
        device_error_record(k_cache.device().index));
  });
  check_launch("qkv_norm_rope_store_kernel", q_out);
}

void silu_and_mul(const Tensor& x, Tensor& out) {
  if (out.numel() == 0) return;
  const int64_t inter = out.dim(1);
  const bool vector =
      inter * static_cast<int64_t>(dtype_size(x.dtype())) % 16 == 0 && aligned16(x.raw()) && aligned16(out.raw());
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (vector) {
      const int64_t vectors = out.numel() / (16 / sizeof(T));
      silu_and_mul_vector_kernel<T>
          <<<blocks_for(vectors, kThreads), kThreads, 0, stream_of(out)>>>(ptr<T>(x), ptr<T>(out), out.dim(0), inter);
    } else {
      silu_and_mul_kernel<T><<<blocks_for(out.numel(), kThreads), kThreads, 0, stream_of(out)>>>(ptr<T>(x), ptr<T>(out),
                                                                                                 out.dim(0), inter);
    }
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
  const int64_t row_bytes = k.dim(1) * k.dim(2) * static_cast<int64_t>(dtype_size(k.dtype()));
  const bool vector = row_bytes % 16 == 0 && aligned16(k.raw()) && aligned16(v.raw()) && aligned16(k_cache.raw()) &&
                      aligned16(v_cache.raw());
  store_kv_kernel<<<k.dim(0), 128, 0, stream_of(k_cache)>>>(
      ptr<char>(k), ptr<char>(v), ptr<int32_t>(slots), ptr<char>(k_cache), ptr<char>(v_cache), row_bytes,
      k_cache.dim(0) * k_cache.dim(1), vector, device_error_record(k_cache.device().index));
  check_launch("store_kv_kernel", k_cache);
}

}  // namespace omni::tensor::cuda
