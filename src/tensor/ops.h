// The compute operations of omnistage, one declaration per op.
//
// Each op validates its arguments (ranks, shapes, dtypes, that all tensors share one device)
// and throws omni::Error(kInvalidArgument) naming the op, the argument and the shapes at fault;
// then it dispatches to the implementation for the tensors' device (tensor/cpu/, tensor/cuda/; a
// build without CUDA answers kUnsupported for CUDA tensors). Outputs are written into tensors the
// caller allocated with the documented shape; unless an op says otherwise, outputs must not alias
// inputs. All inputs must be contiguous; ids and indices are int32.
//
// Index tensors (the ids of embedding, the slots of store_kv, rotary positions) may live on the op's
// device or on the host. Host ones are validated by the dispatcher, which throws at once, and are
// then uploaded through pinned staging memory without a synchronisation (so `host` may be reused
// as soon as the op returns; not inside CUDA graph capture, which needs device-resident ones).
// Device-resident ones (token ids sampled on the GPU) are checked by the kernel itself: it skips
// the offending element and the error is raised, as the same omni::Error(kInvalidArgument), by the
// next synchronisation of that device (a copy to the host, cuda::synchronize).
//
// Dtypes: the floating tensors of one op (written "f" below) share one dtype: float32 on the
// CPU; float32, bfloat16 or float16 on CUDA, where arithmetic is float32 and each result is
// rounded to the dtype once.
//
// Threads: ops may be called from any one thread at a time per output; the CPU implementation
// spreads each op over the machine's cores (a shared pool, OpenBLAS threads for gemm) and
// returns when the result is complete. The CUDA implementation queues its kernels on the device's
// stream (tensor/cuda/device.h) and returns at once, never waiting for the GPU; results are read
// back with Tensor::to().
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "tensor/tensor.h"

namespace omni::tensor::ops {

// Copies the host tensor `host` into `dst` (same shape and dtype, contiguous, on any device) without
// waiting: to a CUDA device through pinned staging memory on its stream, so `host` may be reused
// at once and ops queued later see the bytes. The way a fixed-size step rewrites the device-resident
// inputs a recorded graph reads (tensor/device_graph.h); not itself allowed while recording.
void upload(const Tensor& host, Tensor& dst);

// out[t, :] = table[ids[t], :]. table [V, H] f, ids [T] i32 with 0 <= id < V (else
// kInvalidArgument naming the id; see above for ids on the GPU, whose row is zeroed), out [T, H].
void embedding(const Tensor& table, const Tensor& ids, Tensor& out);
// out[t, :] = sum over j of weights[t, j] * src[index[t, j], :], summed in float32 and rounded to the
// dtype once: how a mixture-of-experts layer combines the rows its experts computed for each token.
// src [N, H] f, index [T, K] i32 (an index tensor, see above: host values outside [0, N) are
// kInvalidArgument naming the entry), weights [T, K] in src's dtype, out [T, H] not overlapping src.
void gather_weighted_sum(const Tensor& src, const Tensor& index, const Tensor& weights, Tensor& out);
// ids[t] = source[rows[t]] where rows[t] >= 0; ids[t] is left as it is where rows[t] < 0. source [S]
// i32 and ids [T] i32 on the op's device, rows [T] i32 (an index tensor, see above: host values must
// be < S, else kInvalidArgument naming the row; a device-resident row >= S leaves ids[t] as it is).
// How an asynchronous step takes the token ids the step before it picked on the device as its inputs
// (CausalLm::launch_step) without a round trip through the host; ids may be a slice of a larger
// buffer (a fixed-size decode step's inputs).
void substitute_ids(const Tensor& source, const Tensor& rows, Tensor& ids);

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

// The products of a decoder layer fused with their neighbouring elementwise steps, for decode steps
// of few rows, where each kernel launch costs about as much as a product. On CUDA each is one kernel
// (the few-row product kernel with the step in its prologue or epilogue) for 1 to
// kFusedLinearMaxRows rows where linear would take that kernel for the shape (small weights; see
// tensor/cuda/linear.cc), and then gives the bits of the unfused sequence written beside it;
// otherwise, and on the CPU, they run that sequence. Shapes and dtypes as the ops they compose.
inline constexpr int64_t kFusedLinearMaxRows = 8;

// Whether rms_norm_linear and linear_add of input `x` and weight `w` into `out` run as that one
// kernel here. Where they do not, their unfused sequence costs a kernel more than linear followed
// by add_rms_norm, so a caller choosing between the two layouts asks this first.
bool linear_fuses(const Tensor& x, const Tensor& w, const Tensor& out);

// out = linear(rms_norm(x, norm_weight, eps), w, bias): x [M, K], norm_weight [K], w [N, K], bias
// [N] or undefined, out [M, N], not overlapping x.
void rms_norm_linear(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w, const Tensor& bias,
                     Tensor& out);

// residual += x @ w^T: linear(x, w, no bias, product) then add(residual, product, residual), each
// rounded to the dtype. x [M, K], w [N, K], residual [M, N], not overlapping x.
void linear_add(const Tensor& x, const Tensor& w, Tensor& residual);

// residual += silu_and_mul(gate_up) @ w^T: silu_and_mul into act [M, K], then linear_add(act, w,
// residual). gate_up [M, 2K], w [N, K], residual [M, N], not overlapping gate_up.
void silu_and_mul_linear_add(const Tensor& gate_up, const Tensor& w, Tensor& residual);

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
// i32 (t, h, w streams) for the M-RoPE layouts; or f32 on the host, finite (fractional M-RoPE
// positions, as Qwen3-Omni's video at 1.5 fps gives), taken as they are on every device (copied to
// it first, with a synchronisation). inv_freq[i] = theta^(-2i/head_dim) and the angles are
// computed in float32, as Hugging Face does.
void rotary_embedding(Tensor& x, const Tensor& positions, const RopeSpec& spec);

// The attention-input step of a Qwen3 layer in one pass, in place: each head of q [T, heads, D] and
// of k [T, kv_heads, D] is RMS-normalised with q_norm / k_norm [D] (as rms_norm: x * rsqrt(mean(x^2)
// + eps) * weight) and then rotated by NeoX RoPE at positions[t] (as rotary_embedding with kNeox and
// `theta`). Arithmetic is float32 and each element is rounded to the dtype once, at the end.
// Undefined q_norm and k_norm (Qwen2: no q/k norm) leave just the rotation of both. positions [T]
// i32 (on the device or the host, as the other index tensors); D even.
void qk_norm_rope(Tensor& q, Tensor& k, const Tensor& q_norm, const Tensor& k_norm, float eps, const Tensor& positions,
                  float theta);

// The attention-input step of a decoder layer in one pass, on the output of one fused q/k/v
// product: each row of qkv [T, heads + 2 * kv_heads, D] holds a token's query heads, then its key
// heads, then its value heads. The query heads go to q_out [T, heads, D] and the key heads to
// k_cache, each normalised and rotated as qk_norm_rope does (the same arithmetic, each element
// rounded once); the value heads go to v_cache unchanged. K and V are written as store_kv writes
// them (caches [num_blocks, block_size, kv_heads, D], slots [T] i32 with its rules: a negative
// device-resident slot writes no K/V for that padding row, whose q_out row is still written). qkv
// is not modified; q_out must not overlap it. Undefined q_norm and k_norm: rotation only.
void qkv_norm_rope_store(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps,
                         const Tensor& positions, float theta, const Tensor& slots, Tensor& q_out, Tensor& k_cache,
                         Tensor& v_cache);

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
// block_size, else kInvalidArgument). A negative slot in device-resident slots marks a padding
// row of a fixed-size step (see paged_decode_attention): nothing is written for it and it is not
// an error; host slots must be >= 0.
void store_kv(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_cache, Tensor& v_cache);

// Causal grouped-query attention over the paged caches (store_kv must already hold the new
// tokens). q [T, heads, head_dim], caches [num_blocks, block_size, kv_heads, head_dim] with
// heads % kv_heads == 0 (query head h reads kv head h / (heads / kv_heads)), out like q.
// A query at position p sees keys at positions j <= p, and with sliding_window > 0 only those
// with j > p - sliding_window. Scores are scaled by `scale`; softmax in float32. Rows of q that no
// sequence owns are zeroed. On CUDA, one-token sequences take a flash-decoding kernel and longer
// ones a tensor-core flash-attention kernel (bfloat16/float16, head_dim 64/128/256 and 64/128);
// the block tables and work lists are uploaded through pinned staging memory on every call,
// without a synchronisation, which also means a call cannot be captured into a CUDA graph as is
// (sample() likewise).
void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, std::span<const PagedSequence> seqs,
                     float scale, int sliding_window, Tensor& out);

// Decode attention with its metadata on the op's device, for steps recorded into a CUDA graph
// (tensor/device_graph.h): the kernels' grids depend only on the shapes, never on the values, so
// one recording serves every step of that batch size. Row b of q [B, heads, head_dim] is one
// sequence's one new token at position context_lens[b] (its K/V already stored by store_kv); it
// attends as paged_attention does to keys [0, context_lens[b]] through block_tables[b, :]
// (block_tables [B, W] i32, row b's first ceil((context_lens[b] + 1) / block_size) entries used).
// context_lens [B] i32; a negative value marks a padding row, which reads nothing and whose out
// row is zeroed. Each row's keys are split over a fixed number of partitions chosen from B and
// W * block_size (the longest context the tables can hold) and merged as flash-decoding does.
// Host metadata is validated here (kInvalidArgument naming the row); device metadata is checked
// by the kernel, which masks a block id outside the cache or a context longer than W * block_size
// and reports it at the next synchronisation like a device-resident KV slot (see above).
// CUDA: bfloat16/float16 with head_dim 16, 32, 64, 128 or 256 (else kUnsupported); the scratch for the
// partitions comes from the device's allocator (the graph pool while capturing).
void paged_decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& context_lens,
                            const Tensor& block_tables, float scale, int sliding_window, Tensor& out);

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

// How one row of logits (one request) becomes a token id in sample(). The steps, in vLLM's order:
// penalties on the logits; temperature; the candidates that top-k and min-p keep (both are
// thresholds, so their order does not matter); the top-p nucleus of those; one draw from the
// renormalised probabilities of what is left (inverse CDF in vocabulary order).
struct SamplingParams {
  // <= 0: greedy, the argmax of the penalised logits (the lowest id on ties); no draw.
  float temperature = 1.0f;
  // Keep the top_k largest logits (and any tied with the k-th); 0 (or >= V): no limit.
  int32_t top_k = 0;
  // Keep the fewest largest candidates whose probability sums to at least top_p, in (0, 1].
  float top_p = 1.0f;
  // Drop candidates whose probability is below min_p times the largest one's, in [0, 1].
  float min_p = 0.0f;
  // Tokens of the prompt or the output: a logit x becomes x / r when x > 0, x * r otherwise (> 0).
  float repetition_penalty = 1.0f;
  // Tokens of the output: minus presence_penalty once, minus frequency_penalty per occurrence.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // The draw's uniform is a pure function of (seed, step) (Philox4x32-10, tensor/philox.h), so a
  // request gets the same ids whatever else is in the batch; the CPU and CUDA backends draw the
  // same uniform (their float sums differ in rounding, so an id can differ where a draw lands on a
  // boundary). `step` is the index of the draw within the request (the number of tokens it has
  // sampled so far); the caller picks a random seed for requests that give none.
  uint64_t seed = 0;
  uint64_t step = 0;
  // Token history for the penalties, read only when a penalty is set (the dispatcher counts them on
  // the host: O(prompt + output) per penalised row per call). Ids must be in [0, V).
  std::span<const int32_t> prompt_tokens;
  std::span<const int32_t> output_tokens;
};

// Draws one token id per row of logits [R, V] f with params[r] (params.size() == R, each checked:
// kInvalidArgument naming the row and the field). The penalties are applied to `logits` in place
// (rounded to its dtype), so the caller sees the logits that were sampled from; temperature and
// the filters are not. ids [R] i32 on the logits' device, or on the host: the op then copies the
// ids back and returns once they are there (the only synchronisation, and only ids cross).
void sample(Tensor& logits, std::span<const SamplingParams> params, Tensor& ids);

// The ops of convolutional audio decoders (the Qwen3-TTS codec decoder). Activations are
// time-major: x [T, C], one row per time step, so that a stream grows by appending rows. Several
// streams decode in one call by packing their rows one after another ("segments": the row count
// of each stream, in order); an op then treats each segment as its own sequence, so the streams
// share kernel launches without seeing each other. On the CPU each output row is computed by the
// same arithmetic whatever the number of rows of the call or its segments (matrix products run on
// fixed tiles of rows, segment by segment), so a stream decoded chunk by chunk, alone or packed
// with others, reproduces a one-shot decode bit for bit. On CUDA the large products go to
// cuBLASLt, whose algorithm depends on the shape of the call: rows agree with the CPU within
// float32 rounding, not bit for bit.

// Convolution along time without padding: x [T_in, C_in], weight [C_out, C_in / groups, k] (the
// PyTorch Conv1d layout), bias [C_out] or an undefined Tensor, out [T_in - (k - 1) * dilation,
// C_out] with out[t, o] = bias[o] + sum_{i, j} weight[o, i, j] * x[t + j * dilation, g(o) + i].
// groups: 1, or C_in == C_out (depthwise); others are kUnsupported. A causal convolution is this
// op on x with (k - 1) * dilation rows of history in front (zeros at the start of a stream;
// prepend_history below). A Linear layer is the case k = 1 (weight [N, K] viewed as [N, K, 1]).
// segments (optional, sum = T_in, each >= (k - 1) * dilation): x holds that many sequences one
// after another, and out their outputs one after another (sum of segments[s] - (k - 1) * dilation
// rows); empty: x is one sequence.
void conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int dilation, int groups, Tensor& out,
            std::span<const int64_t> segments = {});

// Transposed convolution along time: x [T_in, C_in], weight [C_in, C_out, k] (the PyTorch
// ConvTranspose1d layout), bias [C_out] or undefined, stride s >= 1. out [(T_in - context) * s,
// C_out] holds output positions [context * s, T_in * s) of the full transposed convolution
// y[p] = bias + sum_{t * s + j == p} x[t, :] @ weight[:, :, j], inputs before x taken as zero.
// Positions from T_in * s on (the k - s samples a causal decoder trims on the right) are not
// produced; the first `context` rows of x only contribute their overlap (0 <= context <= T_in).
// segments (optional, sum = T_in, each >= context): x holds that many sequences one after another,
// each with its own `context` rows in front, and out their outputs one after another (sum of
// (segments[s] - context) * s rows); empty: x is one sequence.
void conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int stride, int context, Tensor& out,
                      std::span<const int64_t> segments = {});

// The history step of streaming causal layers, for S streams at once: x [sum rows, C] holds the
// new rows of each stream one after another (rows[s] of them), histories[s] [h, C] the last h
// rows stream s has seen (zeros for a fresh stream; all of one shape, dtype and device with x).
// out [sum rows + S * h, C] = per stream [histories[s]; its rows of x], one after another (the
// segments rows[s] + h of conv1d and conv_transpose1d), and then histories[s] becomes the last h
// rows of its segment of out. h may be 0 (out is a copy of x). Histories must not overlap x, out
// or each other.
void prepend_history(const Tensor& x, std::span<const int64_t> rows, std::span<Tensor> histories, Tensor& out);

// SnakeBeta with log-space parameters (as checkpoints store them): x [T, C], alpha [C], beta [C],
// out like x (may be x): out = x + sin(exp(alpha) * x)^2 / (exp(beta) + 1e-9).
void snake_beta(const Tensor& x, const Tensor& alpha, const Tensor& beta, Tensor& out);

// LayerNorm over the last dimension: x [..., D], weight [D], bias [D], out like x (may be x):
// out = (x - mean) / sqrt(var + eps) * weight + bias, with the biased variance.
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out);

// out = a + b * scale with scale [D] along the last dimension of a, b [..., D] (LayerScale,
// ConvNeXt's gamma); out like a, may be a or b.
void add_scaled(const Tensor& a, const Tensor& b, const Tensor& scale, Tensor& out);

// out = a + b * scale with scale [R] along the rows of a, b [R, D] (a gated branch: a shared
// expert's output times its sigmoid gate); out like a, may be a or b.
void add_row_scaled(const Tensor& a, const Tensor& b, const Tensor& scale, Tensor& out);

// out = min(max(x, lo), hi) elementwise; out like x, may be x. lo <= hi.
void clamp(const Tensor& x, float lo, float hi, Tensor& out);

// The ops of image generators (a diffusion transformer, a VAE decoder). Images are channels-last:
// x [H, W, C], one row of C channels per pixel, so that a 1x1 convolution or a per-pixel Linear is
// ops::linear on x viewed as [H * W, C], and a decoded RGB image is [H, W, 3] as image files hold
// it. On CUDA (tensor/cuda/image.cu, dense_attention.cc, dense_flash_attention.cu) they run in
// float32, bfloat16 or float16 with float32 arithmetic, like the other ops; conv2d goes through
// cuBLASLt products, attention through a fused kernel or cuBLASLt (below).

// 2-D convolution with `padding` zeros on every side and `stride` (>= 1) in both directions: x [H,
// W, C_in], weight [C_out, C_in, k, k] (the PyTorch Conv2d layout), bias [C_out] or undefined, out
// [(H + 2 * padding - k) / stride + 1, (W + 2 * padding - k) / stride + 1, C_out]. Each output
// element is one gemm fma chain over (c_in, ky, kx).
void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int padding, int stride, Tensor& out);

// GroupNorm over x [N, C] (N positions of C channels: an image [H, W, C] viewed as [H * W, C]): the
// channels fall into `groups` consecutive groups (C % groups == 0), each normalised over all its
// positions and channels with the biased variance (sums in float64), then out = x̂ * weight[c] +
// bias[c]. weight and bias [C]; out like x, may be x.
void group_norm(const Tensor& x, int groups, const Tensor& weight, const Tensor& bias, float eps, Tensor& out);

// Elementwise out = x * sigmoid(x); out like x, may be x.
void silu(const Tensor& x, Tensor& out);

// Elementwise out = tanh(x); out like x, may be x.
void tanh(const Tensor& x, Tensor& out);

// Nearest-neighbour upsampling by 2 of x [H, W, C] into out [2H, 2W, C].
void upsample_nearest2x(const Tensor& x, Tensor& out);

// Bidirectional (unmasked) attention of one sequence: q [S, heads, D], k and v [S_kv, heads, D],
// out [S, heads, D] = softmax(q k^T * scale) v for each head, the softmax in float32. On CUDA the
// scores are float32 products of the inputs and the probabilities are rounded to the dtype once
// before the second product. bfloat16/float16 with head size 64 or 128 (and scale > 0) take a fused
// flash-style kernel that keeps the scores on chip; other operands materialise the scores of up to
// 1 GiB of queries at a time in memory from the device's allocator.
void attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out);

// Rotates the consecutive pairs (x[2i], x[2i + 1]) of every head of x [T, heads, D] in place by the
// angle whose cosine and sine are cos[t, i] and sin[t, i] (both [T, D / 2]): the complex product of
// RoPE written with torch.view_as_complex, for any per-token angles (several position axes). cos
// and sin share one dtype: x's, or float32 under 16-bit x (the rotation is float32 either way).
void rotate_pairs(Tensor& x, const Tensor& cos, const Tensor& sin);

// out = x * scale, scale [D] along the last dimension of x [..., D]; out like x, may be x.
void mul_columns(const Tensor& x, const Tensor& scale, Tensor& out);

// The ops of audio encoders (a speaker encoder, a codec's encoder) over time-major rows [T, C].
// On CUDA (tensor/cuda/audio_encoder.cu) elu, sigmoid, unfold_rows and copy_columns take any
// float dtype with float32 arithmetic; weighted_mean_std and nearest_codes take float32 (their sums
// are float64 on both backends).

// Elementwise ELU with alpha 1: out = x > 0 ? x : exp(x) - 1 (expm1); out like x, may be x.
void elu(const Tensor& x, Tensor& out);

// Elementwise out = 1 / (1 + exp(-x)); out like x, may be x.
void sigmoid(const Tensor& x, Tensor& out);

// What unfold_rows reads for a row index i outside [0, T): zeros; the nearest edge row; or the row
// mirrored about the edge without repeating it (PyTorch's reflect padding: -i, 2 (T - 1) - i).
enum class RowPadding { kZeros, kReplicate, kReflect };

// The input rows of a strided, dilated 1-D convolution side by side, so that the convolution is
// ops::linear of `out` with the weight in tap-major layout [C_out, k * C_in]: x [T, C], out [R, k * C]
// with out[r, j * C + c] = x[(first + r) * stride + j * dilation - left, c] for j < kernel (`first`
// lets a long input be unfolded R rows at a time). Rows outside x follow `padding`; a reflected
// index must land inside x (kInvalidArgument otherwise: x too short for the padding). kernel,
// stride, dilation >= 1; left, first >= 0; out like x's dtype, not overlapping it.
void unfold_rows(const Tensor& x, int kernel, int stride, int dilation, int64_t left, RowPadding padding, int64_t first,
                 Tensor& out);

// dst[r, dst_column + i] = src[r, src_column + i] for i < width and every row r: src [R, A] and
// dst [R, B] of one dtype, both column ranges inside their tensors; src and dst must not overlap.
void copy_columns(const Tensor& src, int64_t src_column, Tensor& dst, int64_t dst_column, int64_t width);

// Attentive statistics pooling over time (ECAPA-TDNN): x [T, C] float32 (T >= 1), logits [T, C] or
// undefined (equal weights), out [2, C]: with w[:, c] the softmax over t of logits[:, c],
// out[0, c] = sum_t w x (the weighted mean) and out[1, c] = sqrt(max(sum_t w (x - mean)^2, 1e-12)).
// Sums in float64. Undefined logits give the plain mean and (biased) standard deviation.
void weighted_mean_std(const Tensor& x, const Tensor& logits, Tensor& out);

// One quantizer of a residual vector quantizer: codes[f, column] = the entry of codebook [N, D]
// nearest residual[f] (residual [F, D]) in Euclidean distance, then residual[f] -= that entry. The
// caller passes dots [F, N] = residual codebook^T (ops::linear) and norms [N] = each entry's squared
// norm: |r - e|^2 - |r|^2 = norms - 2 dots ranks the entries, and those within 1e-4 (|r|^2 + |best|
// + 1) of the best are measured again exactly (float64), so the choice does not hang on the
// product's rounding; an exact tie goes to the lower index. float32; codes [F, Q] i32 with
// 0 <= column < Q.
void nearest_codes(Tensor& residual, const Tensor& codebook, const Tensor& norms, const Tensor& dots, Tensor& codes,
                   int64_t column);

}  // namespace omni::tensor::ops
