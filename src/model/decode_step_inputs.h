// The device-resident inputs of a fixed-size decode step (CausalLm::prepare_decode_steps), packed
// on the host so that one copy per step moves them: a batch of n one-token sequences padded to
// `rows`, as int32
//   [token ids: rows][positions: rows][KV slots: rows][context lengths: rows][block tables: rows x width]
// Row b < n is slice b; padding rows read token 0 at position 0, write no KV slot (-1), attend to
// nothing (context length -1) and have an all-zero table (see ops::qkv_norm_rope_store and
// ops::paged_decode_attention for what -1 means there).
#pragma once

#include <cstdint>
#include <span>

#include "model/causal_lm.h"

namespace omni::model {

// Int32 values the inputs of `rows` rows with tables of `table_width` blocks take.
int64_t decode_step_inputs_size(int64_t rows, int64_t table_width);

// Throws kInvalidArgument, naming `caller`, unless `batch_sizes` (the sizes of a model's fixed-size
// steps, CausalLm::prepare_decode_steps) are positive and ascending.
void check_step_batch_sizes(std::span<const int> batch_sizes, const char* caller);

// Whether `batch` can run as a fixed-size decode step of at least its size with tables of
// `table_width` blocks: every slice is one token that wants logits, the blocks that token's position
// needs fit in the width, all_logits is off, and M-RoPE positions, if any, are the same whole number
// on all three streams (then the step rotates by that number). (Table and id ranges are checked
// elsewhere.)
bool fits_decode_step(const ForwardBatch& batch, int64_t table_width);

// Writes the inputs of `batch` (fits_decode_step, at most `rows` slices) into `out`, which holds
// decode_step_inputs_size(rows, table_width) values.
void pack_decode_step_inputs(const ForwardBatch& batch, int64_t rows, int64_t table_width, std::span<int32_t> out);

// The rows of the previous asynchronous step that a fixed-size decode step's padded rows read
// their token ids from (CausalLm::launch_step): out[b] = previous_rows[slice b's token] for the
// batch's slices, -1 (keep the packed id) for the padding rows. previous_rows has one entry per
// token of the batch; out holds `rows` values.
void pack_decode_step_previous_rows(const ForwardBatch& batch, std::span<const int32_t> previous_rows,
                                    std::span<int32_t> out);

}  // namespace omni::model
