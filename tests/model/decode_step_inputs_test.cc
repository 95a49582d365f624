#include "model/decode_step_inputs.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"

namespace omni::model {
namespace {

// Two sequences decoding their next token: one at position 17 (second block), one at position 3.
ForwardBatch two_decodes() {
  ForwardBatch batch;
  batch.token_ids = {101, 202};
  batch.positions = {17, 3};
  batch.seqs.push_back({0, 1, 17, {7, 9}, true});
  batch.seqs.push_back({1, 1, 3, {4}, true});
  return batch;
}

TEST(DecodeStepInputsTest, PacksRealRowsAndMarksPaddingRows) {
  const int64_t rows = 4, width = 3;
  std::vector<int32_t> out(decode_step_inputs_size(rows, width), 12345);
  ASSERT_EQ(out.size(), 28u);
  pack_decode_step_inputs(two_decodes(), rows, width, out);
  // ids (padding reads token 0), positions, slots (padding writes none), context lengths (padding
  // attends to nothing), then the tables, zero past each row's blocks.
  const std::vector<int32_t> ids = {101, 202, 0, 0}, positions = {17, 3, 0, 0};
  const std::vector<int32_t> slots = {9 * kKvBlockSize + 1, 4 * kKvBlockSize + 3, -1, -1};
  const std::vector<int32_t> lens = {17, 3, -1, -1}, tables = {7, 9, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0};
  std::vector<int32_t> want;
  for (const auto* part : {&ids, &positions, &slots, &lens, &tables})
    want.insert(want.end(), part->begin(), part->end());
  EXPECT_EQ(out, want);
}

TEST(DecodeStepInputsTest, BatchSizesMustBePositiveAndAscending) {
  const std::vector<int> good{1, 2, 4, 8};
  EXPECT_NO_THROW(check_step_batch_sizes(good, "prepare"));
  for (const std::vector<int>& bad : {std::vector<int>{0, 1}, std::vector<int>{1, 4, 4}, std::vector<int>{2, 1}}) {
    try {
      check_step_batch_sizes(bad, "prepare_frame_steps");
      ADD_FAILURE() << "accepted " << bad.size() << " sizes";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("prepare_frame_steps: batch sizes must be positive and ascending"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(DecodeStepInputsTest, AllPaddingWhenTheBatchIsEmpty) {
  std::vector<int32_t> out(decode_step_inputs_size(2, 1), 7);
  pack_decode_step_inputs(ForwardBatch{}, 2, 1, out);
  EXPECT_EQ(out, (std::vector<int32_t>{0, 0, 0, 0, -1, -1, -1, -1, 0, 0}));
}

TEST(DecodeStepInputsTest, FitsOnlyOneTokenSlicesThatWantLogitsWithinTheTableWidth) {
  EXPECT_TRUE(fits_decode_step(two_decodes(), 2));
  // Position 17 needs two blocks.
  EXPECT_FALSE(fits_decode_step(two_decodes(), 1));
  ForwardBatch all_logits = two_decodes();
  all_logits.all_logits = true;
  EXPECT_FALSE(fits_decode_step(all_logits, 2));
  ForwardBatch chunk = two_decodes();
  chunk.seqs[1].wants_logits = false;
  EXPECT_FALSE(fits_decode_step(chunk, 2));
  ForwardBatch prefill;
  prefill.token_ids = {1, 2, 3};
  prefill.positions = {0, 1, 2};
  prefill.seqs.push_back({0, 3, 0, {5}, true});
  EXPECT_FALSE(fits_decode_step(prefill, 4));
  EXPECT_FALSE(fits_decode_step(ForwardBatch{}, 4));
}

// Text decoding after media: each token's three M-RoPE streams are its position plus the rope delta,
// one whole number, and the step rotates by it; the KV slot and context length still follow the
// sequence's length.
TEST(DecodeStepInputsTest, EqualWholeMropeStreamsRunAsTheirPlainPosition) {
  ForwardBatch batch = two_decodes();
  batch.mrope_positions = {9, 30, 9, 30, 9, 30};  // [3, tokens]: deltas -8 and +27
  ASSERT_TRUE(fits_decode_step(batch, 2));
  std::vector<int32_t> out(decode_step_inputs_size(2, 2));
  pack_decode_step_inputs(batch, 2, 2, out);
  EXPECT_EQ(std::vector<int32_t>(out.begin() + 2, out.begin() + 4), (std::vector<int32_t>{9, 30}));  // positions
  EXPECT_EQ(std::vector<int32_t>(out.begin() + 4, out.begin() + 6),
            (std::vector<int32_t>{9 * kKvBlockSize + 1, 4 * kKvBlockSize + 3}));                     // slots
  EXPECT_EQ(std::vector<int32_t>(out.begin() + 6, out.begin() + 8), (std::vector<int32_t>{17, 3}));  // lengths

  // Streams that differ (a media token) or a fractional delta need the M-RoPE rotation.
  ForwardBatch media = batch;
  media.mrope_positions[3] = 31;
  EXPECT_FALSE(fits_decode_step(media, 2));
  ForwardBatch fractional = batch;
  fractional.mrope_positions = {9.5f, 30, 9.5f, 30, 9.5f, 30};
  EXPECT_FALSE(fits_decode_step(fractional, 2));
  ForwardBatch short_streams = batch;
  short_streams.mrope_positions.pop_back();
  EXPECT_FALSE(fits_decode_step(short_streams, 2));
}

// Row b of the padded step is slice b, wherever its token sits in the batch; padding keeps its id.
TEST(DecodeStepInputsTest, PreviousRowsFollowTheSlicesAndSkipPadding) {
  ForwardBatch batch = two_decodes();
  std::swap(batch.seqs[0].query_start, batch.seqs[1].query_start);
  const std::vector<int32_t> previous_rows = {5, -1};  // token 0 (slice 1) reads row 5
  std::vector<int32_t> out(4, 99);
  pack_decode_step_previous_rows(batch, previous_rows, out);
  EXPECT_EQ(out, (std::vector<int32_t>{-1, 5, -1, -1}));
}

}  // namespace
}  // namespace omni::model
