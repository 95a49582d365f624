#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <memory>

namespace omni::engine {
namespace {

class SchedulerTest : public ::testing::Test {
 protected:
  Sequence& add(int prompt_len) {
    auto seq = std::make_unique<Sequence>();
    seq->id = static_cast<int64_t>(seqs_.size());
    seq->token_ids.assign(prompt_len, 1);
    seq->num_prompt_tokens = prompt_len;
    seqs_.push_back(std::move(seq));
    scheduler_->add(*seqs_.back());
    return *seqs_.back();
  }
  void make(SchedulerConfig config, int num_blocks, bool caching = false) {
    kv_ = std::make_unique<KvCacheManager>(num_blocks, caching);
    scheduler_ = std::make_unique<Scheduler>(config, *kv_);
  }
  // Runs the step as the engine would: completes it and gives every sampling sequence a token.
  SchedulerOutput step() {
    SchedulerOutput out = scheduler_->schedule();
    scheduler_->complete(out);
    for (const ScheduledSequence& s : out.scheduled) {
      if (s.samples) s.seq->token_ids.push_back(2);
    }
    return out;
  }

  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Sequence>> seqs_;
};

TEST_F(SchedulerTest, SplitsPromptsIntoChunksWithinTheTokenBudget) {
  make({.max_num_seqs = 4, .max_num_batched_tokens = 32, .enable_chunked_prefill = true}, 32);
  Sequence& a = add(50);
  Sequence& b = add(10);
  SchedulerOutput s1 = step();
  ASSERT_EQ(s1.scheduled.size(), 1u);
  EXPECT_EQ(s1.scheduled[0].num_new_tokens, 32);
  EXPECT_FALSE(s1.scheduled[0].samples);
  EXPECT_EQ(s1.num_batched_tokens, 32);

  SchedulerOutput s2 = step();  // a's last 18 tokens, then b's 10: both finish their prompts
  ASSERT_EQ(s2.scheduled.size(), 2u);
  EXPECT_EQ(s2.scheduled[0].seq, &a);
  EXPECT_EQ(s2.scheduled[0].context_len, 32);
  EXPECT_EQ(s2.scheduled[0].num_new_tokens, 18);
  EXPECT_TRUE(s2.scheduled[0].samples);
  EXPECT_EQ(s2.scheduled[1].seq, &b);
  EXPECT_EQ(s2.scheduled[1].num_new_tokens, 10);

  Sequence& c = add(40);
  SchedulerOutput s3 = step();  // two decodes and a 30-token chunk of c
  ASSERT_EQ(s3.scheduled.size(), 3u);
  EXPECT_EQ(s3.scheduled[0].num_new_tokens, 1);
  EXPECT_EQ(s3.scheduled[1].num_new_tokens, 1);
  EXPECT_EQ(s3.scheduled[2].seq, &c);
  EXPECT_EQ(s3.scheduled[2].num_new_tokens, 30);
  EXPECT_EQ(a.num_computed_tokens, 51);
}

TEST_F(SchedulerTest, WithoutChunkingAPromptWaitsForABudgetThatHoldsIt) {
  make({.max_num_seqs = 4, .max_num_batched_tokens = 40, .enable_chunked_prefill = false}, 32);
  add(30);
  Sequence& b = add(20);
  SchedulerOutput s1 = step();
  ASSERT_EQ(s1.scheduled.size(), 1u) << "b's 20 tokens do not fit the remaining 10";
  SchedulerOutput s2 = step();
  ASSERT_EQ(s2.scheduled.size(), 2u);
  EXPECT_EQ(s2.scheduled[1].seq, &b);
  EXPECT_EQ(s2.scheduled[1].num_new_tokens, 20);
}

TEST_F(SchedulerTest, HonoursMaxNumSeqs) {
  make({.max_num_seqs = 2, .max_num_batched_tokens = 100, .enable_chunked_prefill = true}, 32);
  for (int i = 0; i < 4; ++i) add(5);
  EXPECT_EQ(step().scheduled.size(), 2u);
  EXPECT_EQ(scheduler_->num_running(), 2);
  EXPECT_EQ(scheduler_->num_waiting(), 2);
}

TEST_F(SchedulerTest, PreemptsTheNewestRunningSequenceAndResumesItFirst) {
  // 4 blocks: a and b take 2 each; then a's 33rd token needs a third.
  make({.max_num_seqs = 4, .max_num_batched_tokens = 64, .enable_chunked_prefill = true}, 4);
  Sequence& a = add(32);
  Sequence& b = add(20);
  step();  // prompts: a 2 blocks, b 2 blocks
  Sequence& c = add(3);
  SchedulerOutput s2 = step();  // a's token 33 needs a 3rd block: b is preempted; c must not be admitted
  ASSERT_EQ(s2.preempted.size(), 1u);
  EXPECT_EQ(s2.preempted[0], &b);
  EXPECT_EQ(b.status, SequenceStatus::kPreempted);
  EXPECT_EQ(b.num_computed_tokens, 0);
  EXPECT_TRUE(b.block_ids.empty());
  EXPECT_EQ(b.num_tokens(), 21) << "its sampled token is kept";
  ASSERT_EQ(s2.scheduled.size(), 1u);
  EXPECT_EQ(s2.scheduled[0].seq, &a);
  EXPECT_EQ(a.block_ids.size(), 3u);
  EXPECT_EQ(scheduler_->admission().waiting().front(), &b) << "back at the head of the queue, ahead of c";
  EXPECT_EQ(scheduler_->num_preemptions(), 1u);

  scheduler_->remove(a);  // a finishes: b recomputes its 21 tokens
  SchedulerOutput s3 = step();
  ASSERT_GE(s3.scheduled.size(), 1u);
  EXPECT_EQ(s3.scheduled[0].seq, &b);
  EXPECT_EQ(s3.scheduled[0].num_new_tokens, 21);
  EXPECT_TRUE(s3.scheduled[0].samples);
  EXPECT_EQ(b.status, SequenceStatus::kRunning);
  EXPECT_EQ(s3.scheduled.back().seq, &c);
}

TEST_F(SchedulerTest, ASequenceThatCannotGrowPreemptsItself) {
  make({.max_num_seqs = 4, .max_num_batched_tokens = 64, .enable_chunked_prefill = true}, 3);
  Sequence& a = add(20);
  Sequence& b = add(16);
  step();                       // a: 2 blocks, b: 1 block; both sample
  SchedulerOutput s2 = step();  // a fits its 2 blocks; b needs a 2nd, none is free, and b is the newest
  ASSERT_EQ(s2.preempted.size(), 1u);
  EXPECT_EQ(s2.preempted[0], &b);
  ASSERT_EQ(s2.scheduled.size(), 1u);
  EXPECT_EQ(s2.scheduled[0].seq, &a);
  EXPECT_EQ(kv_->num_free_blocks(), 1);
}

}  // namespace
}  // namespace omni::engine
