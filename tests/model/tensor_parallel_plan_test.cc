// How a decoder is cut across tensor-parallel ranks (vLLM's layout): heads and the MLP split
// evenly, KV heads split or replicated, the vocabulary in ceil(vocab / size) rows per rank;
// sizes that do not fit are rejected naming the count.
#include <gtest/gtest.h>

#include <string>

#include "base/error.h"
#include "model/tensor_parallel.h"

namespace omni::model {
namespace {

TextModelConfig shapes(int heads, int kv_heads, int intermediate, int vocab) {
  TextModelConfig c;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.intermediate_size = intermediate;
  c.vocab_size = vocab;
  return c;
}

TEST(TensorParallelPlanTest, SplitsHeadsKvHeadsMlpAndVocabulary) {
  // Qwen3-8B: 32 heads, 8 KV heads, MLP 12288, vocab 151936.
  const TextModelConfig c = shapes(32, 8, 12288, 151936);
  const DecoderShard s = plan_decoder_shard(c, 1, 2, "config.json");
  EXPECT_EQ(s.heads, 16);
  EXPECT_EQ(s.kv_heads, 4);
  EXPECT_EQ(s.kv_head_begin, 4);
  EXPECT_EQ(s.intermediate, 6144);
  EXPECT_EQ(s.vocab_rows, 75968);
  EXPECT_EQ(s.vocab_begin, 75968);
  const DecoderShard one = plan_decoder_shard(c, 0, 1, "config.json");
  EXPECT_EQ(one.heads, 32);
  EXPECT_EQ(one.kv_heads, 8);
  EXPECT_EQ(one.vocab_rows, 151936);
}

TEST(TensorParallelPlanTest, ReplicatesKvHeadsWhenRanksOutnumberThem) {
  // 8 heads, 2 KV heads over 8 ranks: ranks 0-3 read KV head 0, ranks 4-7 KV head 1 (query heads
  // 0-3 and 4-7 of the model).
  const TextModelConfig c = shapes(8, 2, 64, 100);
  for (int rank = 0; rank < 8; ++rank) {
    const DecoderShard s = plan_decoder_shard(c, rank, 8, "config.json");
    EXPECT_EQ(s.heads, 1);
    EXPECT_EQ(s.kv_heads, 1);
    EXPECT_EQ(s.kv_head_begin, rank / 4) << "rank " << rank;
  }
  // A vocabulary that does not divide: 13 rows per rank, the last rank's 9 real ones padded.
  EXPECT_EQ(plan_decoder_shard(c, 7, 8, "config.json").vocab_rows, 13);
  EXPECT_EQ(plan_decoder_shard(c, 7, 8, "config.json").vocab_begin, 91);
}

void expect_rejected(const TextModelConfig& c, int size, const std::string& message) {
  try {
    plan_decoder_shard(c, 0, size, "m/config.json");
    FAIL() << "size " << size << " accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(TensorParallelPlanTest, RejectsSizesThatDoNotFitNamingTheCount) {
  expect_rejected(shapes(6, 2, 64, 100), 4,
                  "m/config.json: tensor_parallel_size 4 does not divide num_attention_heads 6");
  expect_rejected(shapes(6, 2, 64, 100), 3, "tensor_parallel_size 3 and num_key_value_heads 2: one must divide");
  expect_rejected(shapes(4, 2, 90, 100), 4, "tensor_parallel_size 4 does not divide intermediate_size 90");
  expect_rejected(shapes(4, 2, 64, 100), 0, "tensor-parallel rank 0 of size 0");
}

}  // namespace
}  // namespace omni::model
