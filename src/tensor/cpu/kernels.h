// The CPU implementations behind ops.h. Called only by the dispatchers in tensor/ops.cc, which
// have already validated shapes, dtypes and devices; these functions assume valid arguments.
#pragma once

#include "tensor/ops.h"
#include "tensor/penalised_token.h"

namespace omni::tensor::cpu {

void embedding(const Tensor& table, const Tensor& ids, Tensor& out);
void gather_weighted_sum(const Tensor& src, const Tensor& index, const Tensor& weights, Tensor& out);
void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out);
void add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& weight, float eps, Tensor& out);
void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out);
void matmul(const Tensor& a, const Tensor& b, bool transpose_b, Tensor& out);
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

// One sequence each (the dispatcher splits packed segments).
void conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int dilation, int groups, Tensor& out);
void conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int stride, int context, Tensor& out);
void snake_beta(const Tensor& x, const Tensor& alpha, const Tensor& beta, Tensor& out);
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out);
void add_scaled(const Tensor& a, const Tensor& b, const Tensor& scale, Tensor& out);
void add_row_scaled(const Tensor& a, const Tensor& b, const Tensor& scale, Tensor& out);
void clamp(const Tensor& x, float lo, float hi, Tensor& out);
void prepend_history(const Tensor& x, std::span<const int64_t> rows, std::span<Tensor> histories, Tensor& out);

void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int padding, int stride, Tensor& out);
void group_norm(const Tensor& x, int groups, const Tensor& weight, const Tensor& bias, float eps, Tensor& out);
void silu(const Tensor& x, Tensor& out);
void tanh(const Tensor& x, Tensor& out);
void upsample_nearest2x(const Tensor& x, Tensor& out);
void attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out);
void rotate_pairs(Tensor& x, const Tensor& cos, const Tensor& sin);
void mul_columns(const Tensor& x, const Tensor& scale, Tensor& out);

// The audio encoders' ops (ops.h).
void elu(const Tensor& x, Tensor& out);
void sigmoid(const Tensor& x, Tensor& out);
void unfold_rows(const Tensor& x, int kernel, int stride, int dilation, int64_t left, ops::RowPadding padding,
                 int64_t first, Tensor& out);
void copy_columns(const Tensor& src, int64_t src_column, Tensor& dst, int64_t dst_column, int64_t width);
void weighted_mean_std(const Tensor& x, const Tensor& logits, Tensor& out);
void nearest_codes(Tensor& residual, const Tensor& codebook, const Tensor& norms, const Tensor& dots, Tensor& codes,
                   int64_t column);

}  // namespace omni::tensor::cpu
