// The CUDA implementations behind ops.h. Called only by the dispatchers in tensor/ops.cc, which
// have already validated shapes, dtypes (float32, bfloat16 or float16, one per op), devices, block
// tables and the values of index tensors that came from the host (and uploaded them); these
// functions assume valid arguments, except that the kernels of embedding, store_kv and
// qkv_norm_rope_store check ids and slots themselves, for those that were already on the GPU
// (cuda/device.h's DeviceErrorRecord).
//
// Every function queues its kernels on the device's stream (cuda/device.h) and returns without
// waiting; a failed launch is omni::Error(kInternal) naming the kernel. Arithmetic is float32
// whatever the storage dtype; results are rounded to the output dtype once.
#pragma once

#include "tensor/ops.h"
#include "tensor/penalised_token.h"

namespace omni::tensor::cuda {

void embedding(const Tensor& table, const Tensor& ids, Tensor& out);
void gather_weighted_sum(const Tensor& src, const Tensor& index, const Tensor& weights, Tensor& out);
void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out);
void add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& weight, float eps, Tensor& out);
void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out);
void matmul(const Tensor& a, const Tensor& b, bool transpose_b, Tensor& out);

// The products behind linear and matmul (cuda/linear.cc, cuda/gemv.cu). linear and matmul (with
// transpose_b) take gemv where gemv_supports says it may and the measured rule of cuda/linear.cc
// says it is faster (few rows, weights up to 16 Mi elements), else cuBLASLt; linear_cublas always
// takes cuBLASLt (for benchmarks and tests that compare the two).
//
// gemv: out[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) with the weight read once for all rows,
// float32 accumulation, reduced in a fixed order (the same inputs give the same bits, in a graph
// or not). It needs 1 <= M <= kGemvMaxRows, K a multiple of a 16-byte chunk (8 bfloat16/float16,
// 4 float32 elements) and x and w starting at 16-byte aligned addresses: gemv_supports.
inline constexpr int kGemvMaxRows = ops::kFusedLinearMaxRows;
bool gemv_supports(const Tensor& x, const Tensor& w);
void gemv(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out);

// The fused forms of gemv behind ops::rms_norm_linear, linear_add and silu_and_mul_linear_add; each
// gives the bits of the unfused sequence of kernels it replaces (cuda/gemv.cu says how).
//   kRmsNorm: out = rms_norm(x, norm_weight, eps) w^T (+ bias).
//   kAccumulate: out += x w^T (+ bias), the product rounded to the dtype before the add.
//   kSiluAndMulAccumulate: out += silu_and_mul(x) w^T (+ bias), x [M, 2K] holding gate then up.
// gemv_supports(fusion, ...) adds to gemv_supports that a norm weight starts 16-byte aligned, and
// linear_prefers_gemv is linear's rule (supported, and faster than cuBLASLt for the shape); for
// kSiluAndMulAccumulate pass x as the [M, 2K] gate/up rows. out must not overlap x.
enum class GemvFusion { kNone, kRmsNorm, kAccumulate, kSiluAndMulAccumulate };
bool gemv_supports(GemvFusion fusion, const Tensor& x, const Tensor& w, const Tensor& norm_weight);
void gemv(GemvFusion fusion, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& norm_weight, float eps,
          Tensor& out);
bool linear_prefers_gemv(GemvFusion fusion, const Tensor& x, const Tensor& w, const Tensor& norm_weight,
                         const Tensor& out);
void linear_cublas(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out);
void rotary_embedding(Tensor& x, const Tensor& positions, const ops::RopeSpec& spec);
void qk_norm_rope(Tensor& q, Tensor& k, const Tensor& q_norm, const Tensor& k_norm, float eps, const Tensor& positions,
                  float theta);
void store_kv(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_cache, Tensor& v_cache);
void qkv_norm_rope_store(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps,
                         const Tensor& positions, float theta, const Tensor& slots, Tensor& q_out, Tensor& k_cache,
                         Tensor& v_cache);
void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     std::span<const ops::PagedSequence> seqs, float scale, int sliding_window, Tensor& out);
void paged_decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& context_lens,
                            const Tensor& block_tables, float scale, int sliding_window, Tensor& out);
void silu_and_mul(const Tensor& x, Tensor& out);
void gelu(const Tensor& x, ops::GeluApproximation approximation, Tensor& out);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void softmax(const Tensor& x, Tensor& out);
void argmax(const Tensor& x, Tensor& out);
void substitute_ids(const Tensor& source, const Tensor& rows, Tensor& ids);
void top_k(const Tensor& x, int k, Tensor& values, Tensor& indices);
// penalties: (row, token, output count, in prompt) of every distinct penalised token, sorted by row.
void sample(Tensor& logits, std::span<const ops::SamplingParams> params, std::span<const PenalisedToken> penalties,
            Tensor& ids);
// packed: [R, ops::kPackedSamplingParamsWords] i32 on the logits' device (tensor/packed_sampling_params.h).
void sample_packed(const Tensor& logits, const Tensor& packed, uint64_t step_offset, Tensor& ids);

// The audio-decoder ops (cuda/conv.cu, cuda/stream_history.cu, cuda/audio_elementwise.cu).
// segments: never empty (the dispatcher passes {T_in} for one sequence).
void conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int dilation, int groups,
            std::span<const int64_t> segments, Tensor& out);
void conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int stride, int context,
                      std::span<const int64_t> segments, Tensor& out);
void prepend_history(const Tensor& x, std::span<const int64_t> rows, std::span<Tensor> histories, Tensor& out);
void snake_beta(const Tensor& x, const Tensor& alpha, const Tensor& beta, Tensor& out);
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out);
void add_scaled(const Tensor& a, const Tensor& b, const Tensor& scale, Tensor& out);
void add_row_scaled(const Tensor& a, const Tensor& b, const Tensor& scale, Tensor& out);
void clamp(const Tensor& x, float lo, float hi, Tensor& out);

// A device copy of the host int32 tensor `host`, queued on the device's stream through a pinned
// staging buffer (cuda/device.h's upload_async): no synchronisation, and `host` may be reused at once.
Tensor upload_ints(const Tensor& host, int device);

// The largest head_dim paged_attention supports (per-lane accumulators are sized by it).
int max_attention_head_dim();
// Whether paged_decode_attention has a kernel for the dtype and head size.
bool paged_decode_attention_supports(DType dtype, int head_dim);

// out[r, c] += bias[c] for out [R, C], bias [C] (same dtype); used by linear when K == 0.
void add_row_bias(const Tensor& bias, Tensor& out);

// The audio encoders' ops (ops.h).
void elu(const Tensor& x, Tensor& out);
void sigmoid(const Tensor& x, Tensor& out);
void unfold_rows(const Tensor& x, int kernel, int stride, int dilation, int64_t left, ops::RowPadding padding,
                 int64_t first, Tensor& out);
void copy_columns(const Tensor& src, int64_t src_column, Tensor& dst, int64_t dst_column, int64_t width);
void weighted_mean_std(const Tensor& x, const Tensor& logits, Tensor& out);
void nearest_codes(Tensor& residual, const Tensor& codebook, const Tensor& norms, const Tensor& dots, Tensor& codes,
                   int64_t column);

}  // namespace omni::tensor::cuda
