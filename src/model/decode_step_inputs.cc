#include "model/decode_step_inputs.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "base/error.h"

namespace omni::model {

int64_t decode_step_inputs_size(int64_t rows, int64_t table_width) { return rows * (4 + table_width); }

void check_step_batch_sizes(std::span<const int> batch_sizes, const char* caller) {
  int previous = 0;
  for (int size : batch_sizes) {
    if (size <= previous) {
      throw_error(ErrorCode::kInvalidArgument, "{}: batch sizes must be positive and ascending, got {} after {}",
                  caller, size, previous);
    }
    previous = size;
  }
}

namespace {

// A decode token's M-RoPE positions are one plain position when its three streams agree on a whole
// number (text after media: position + rope delta), and the rotation of equal streams is the plain
// rotation at that position. Layout [3, tokens], as ForwardBatch holds them.
bool mrope_positions_are_plain(const ForwardBatch& batch) {
  const size_t tokens = batch.token_ids.size();
  if (batch.mrope_positions.empty()) return true;
  if (batch.mrope_positions.size() != 3 * tokens) return false;
  for (size_t t = 0; t < tokens; ++t) {
    const float p = batch.mrope_positions[t];
    if (p != std::floor(p) || p < 0.0f || p > static_cast<float>(INT32_MAX / 2) ||
        batch.mrope_positions[tokens + t] != p || batch.mrope_positions[2 * tokens + t] != p) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool fits_decode_step(const ForwardBatch& batch, int64_t table_width) {
  if (batch.all_logits || batch.seqs.empty() || batch.token_ids.size() != batch.seqs.size()) return false;
  if (!mrope_positions_are_plain(batch)) return false;
  return std::all_of(batch.seqs.begin(), batch.seqs.end(), [&](const SequenceSlice& seq) {
    const int64_t blocks = (static_cast<int64_t>(seq.context_len) + kKvBlockSize) / kKvBlockSize;
    return seq.query_len == 1 && seq.wants_logits && blocks <= table_width;
  });
}

void pack_decode_step_inputs(const ForwardBatch& batch, int64_t rows, int64_t table_width, std::span<int32_t> out) {
  int32_t* ids = out.data();
  int32_t* positions = ids + rows;
  int32_t* slots = positions + rows;
  int32_t* context_lens = slots + rows;
  int32_t* tables = context_lens + rows;
  std::fill(ids, slots, 0);
  std::fill(slots, tables, -1);
  std::fill_n(tables, rows * table_width, 0);
  for (size_t b = 0; b < batch.seqs.size(); ++b) {
    const SequenceSlice& seq = batch.seqs[b];
    const int32_t pos = seq.context_len;
    ids[b] = batch.token_ids[seq.query_start];
    positions[b] = batch.mrope_positions.empty() ? batch.positions[seq.query_start]
                                                 : static_cast<int32_t>(batch.mrope_positions[seq.query_start]);
    slots[b] = seq.block_table[pos / kKvBlockSize] * kKvBlockSize + pos % kKvBlockSize;
    context_lens[b] = pos;
    const size_t used = std::min(seq.block_table.size(), static_cast<size_t>(table_width));
    std::copy_n(seq.block_table.begin(), used, tables + static_cast<int64_t>(b) * table_width);
  }
}

void pack_decode_step_previous_rows(const ForwardBatch& batch, std::span<const int32_t> previous_rows,
                                    std::span<int32_t> out) {
  std::fill(out.begin(), out.end(), -1);
  for (size_t b = 0; b < batch.seqs.size() && b < out.size(); ++b) {
    out[b] = previous_rows[static_cast<size_t>(batch.seqs[b].query_start)];
  }
}

}  // namespace omni::model
