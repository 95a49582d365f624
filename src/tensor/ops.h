// The compute operations of omnistage, one declaration per op.
//
// Each op validates its arguments (ranks, shapes, dtypes, that all tensors share one device)
// and throws omni::Error(kInvalidArgument) naming the op, the argument and the shapes at fault;
// then it dispatches to the implementation for the tensors' device (tensor/cpu/, tensor/cuda/; a
// build without CUDA answers kUnsupported for CUDA tensors). Outputs are written into tensors the
// caller allocated with the documented shape; unless an op says otherwise, outputs must not alias
// inputs. All inputs must be contiguous; ids and indices are int32.
//
// Dtypes: the floating tensors of one op (written "f" below) share one dtype: float32 on the
// CPU; float32, bfloat16 or float16 on CUDA, where arithmetic is float32 and each result is
// rounded to the dtype once.
//
// Threads: ops may be called from any one thread at a time per output; the CPU implementation
// spreads each op over the machine's cores (a shared pool, OpenBLAS threads for gemm) and
// returns when the result is complete. The CUDA implementation queues its kernels on the device's
// stream (tensor/cuda/device.h) and returns at once; results are read back with Tensor::to().
// Where a dispatcher validates the values of ids, slots or block tables that live on a GPU, it
// copies them to the host first (a synchronisation).
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "tensor/tensor.h"

namespace omni::tensor::ops {

// How a dispatcher treats the values of ids or slots that live on a GPU: copy them to the host and
// check them (a synchronisation, the default), or trust the caller, who checked them on the host
// before uploading them (a model's step, which must not wait for the device between ops).
// Host-resident values are always checked.
enum class IndexCheck { kCopyAndCheck, kTrustCaller };

// out[t, :] = table[ids[t], :]. table [V, H] f, ids [T] i32 with 0 <= id < V (else
// kInvalidArgument naming the id), out [T, H].
void embedding(const Tensor& table, const Tensor& ids, Tensor& out, IndexCheck check = IndexCheck::kCopyAndCheck);

// Per row of the last dimension: out = x * rsqrt(mean(x^2) + eps) * weight, computed in float32
// in that order (Hugging Face's Qwen RMSNorm). x [..., D], weight [D], out like x; out may be x.
void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out);

// The pre-norm step of a decoder layer in one pass: residual = x + residual (in place, rounded to
// the dtype), then out = rms_norm(residual, weight, eps). Shapes as rms_norm; out may be x, never
// residual.
void add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& weight, float eps, Tensor& out);

// out = x @ w^T (+ bias): x [M, K], w [N, K] (the PyTorch Linear layout), bias [N] or an
// undefined Tensor, out [M, N]. M == 1 takes a matrix-vector path.
void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out);

// out = a @ b (or a @ b^T when transpose_b): a [M, K], b [K, N] (or [N, K]), out [M, N].
void matmul(const Tensor& a, const Tensor& b, bool transpose_b, Tensor& out);

enum class RopeLayout {
  kNeox,              // rotate_half over the whole head, one position stream
  kMropeSectioned,    // Qwen2-VL / Qwen2.5-Omni: consecutive frequency chunks take t, h, w
  kMropeInterleaved,  // Qwen3-VL / Qwen3-Omni: frequency slots 1, 4, 7… take h; 2, 5, 8… take w
};

struct RopeSpec {
  RopeLayout layout = RopeLayout::kNeox;
  float theta = 10000.0f;
  // Frequency slots per stream (t, h, w) for the M-RoPE layouts; they must sum to at most
  // head_dim / 2 (interleaved: slots past 3 * min(section) stay on t).
  std::array<int, 3> mrope_section{};
};

// Rotates x [T, heads, head_dim] in place (head_dim even). positions: [T] i32 for kNeox, [3, T]
// i32 (t, h, w streams) for the M-RoPE layouts. inv_freq[i] = theta^(-2i/head_dim) and the
// angles are computed in float32, as Hugging Face does.
void rotary_embedding(Tensor& x, const Tensor& positions, const RopeSpec& spec);

// One sequence of a paged attention batch: its `query_len` queries are rows
// [query_start, query_start + query_len) of q and sit at KV positions
// [context_len, context_len + query_len); block_table[i] holds KV positions
// [i * block_size, (i + 1) * block_size).
struct PagedSequence {
  int32_t query_start = 0;
  int32_t query_len = 0;
  int32_t context_len = 0;
  std::span<const int32_t> block_table;
};

// Writes k, v [T, kv_heads, head_dim] into the caches [num_blocks, block_size, kv_heads,
// head_dim] at slots[t] = block * block_size + offset (slots [T] i32, each < num_blocks *
// block_size, else kInvalidArgument).
void store_kv(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_cache, Tensor& v_cache,
              IndexCheck check = IndexCheck::kCopyAndCheck);

// Causal grouped-query attention over the paged caches (store_kv must already hold the new
// tokens). q [T, heads, head_dim], caches [num_blocks, block_size, kv_heads, head_dim] with
// heads % kv_heads == 0 (query head h reads kv head h / (heads / kv_heads)), out like q.
// A query at position p sees keys at positions j <= p, and with sliding_window > 0 only those
// with j > p - sliding_window. Scores are scaled by `scale`; softmax in float32.
void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, std::span<const PagedSequence> seqs,
                     float scale, int sliding_window, Tensor& out);

// x [T, 2I] holding gate then up: out [T, I] = silu(gate) * up.
void silu_and_mul(const Tensor& x, Tensor& out);

enum class GeluApproximation { kNone, kTanh };
// Elementwise GELU: exact (erf) or the tanh approximation. out like x; out may be x.
void gelu(const Tensor& x, GeluApproximation approximation, Tensor& out);

// Elementwise a + b, same shapes; out may be a or b.
void add(const Tensor& a, const Tensor& b, Tensor& out);

// Softmax over the last dimension of x [R, N]; out like x; out may be x.
void softmax(const Tensor& x, Tensor& out);

// Index of the largest value of each row of x [R, N] (the first one on ties); out [R] i32.
void argmax(const Tensor& x, Tensor& out);

// The k largest values of each row of x [R, N] in descending order (ties: lower index first)
// and their indices: values [R, k] (x's dtype), indices [R, k] i32; 1 <= k <= N.
void top_k(const Tensor& x, int k, Tensor& values, Tensor& indices);

}  // namespace omni::tensor::ops
