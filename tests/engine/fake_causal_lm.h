// Test doubles for the engine: a deterministic CausalLm whose logits are a fixed function of the
// token history it reads back from its own KV blocks, and a detokenizer over a small piece table.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/detokenizer.h"
#include "model/causal_lm.h"

namespace omni::engine::testing {

// The KV "storage" of each slot is the (token, position) written there. Logits for a sequence are
// computed from the history read back through the slice's block table, so a wrong block table, a
// block shared or reused by mistake, or stale KV changes the output (and a slot that holds another
// position throws). Logits are pseudo-random in [-4, 4] from a hash of the history, plus `boost`
// on the token `preferred(history)` when that function is set.
class FakeCausalLm : public model::CausalLm {
 public:
  struct Slice {
    int query_len;
    int context_len;
    bool wants_logits;
  };
  using Batch = std::vector<Slice>;

  explicit FakeCausalLm(int vocab_size = 97, std::vector<int32_t> eos_token_ids = {}, int max_positions = 4096);

  const model::CausalLmInfo& info() const override { return info_; }
  size_t kv_bytes_per_block() const override { return 1024; }
  void init_kv_cache(int num_blocks) override;
  void forward(const model::ForwardBatch& batch, std::vector<float>& logits) override;

  // The next-token rule on top of the hashed logits (nullptr: none).
  std::function<int32_t(std::span<const int32_t> history)> preferred;
  float boost = 20.0f;
  // Called at the start of every forward (tests use it to hold the engine inside a step).
  std::function<void()> on_forward;

  int num_kv_blocks() const { return num_blocks_; }
  const std::vector<Batch>& batches() const { return batches_; }
  // The logits the model gives after `history` (what forward computes for it).
  std::vector<float> logits_for(std::span<const int32_t> history) const;

 private:
  model::CausalLmInfo info_;
  int num_blocks_ = 0;
  std::vector<int32_t> slot_tokens_;
  std::vector<int32_t> slot_positions_;
  std::vector<Batch> batches_;
};

// Token t decodes to pieces[t]; pieces may be partial UTF-8, which the stream holds back until the
// character is complete. Tokens in `special` produce no text when skip_special_tokens is set.
class FakeDetokenizer : public Detokenizer {
 public:
  FakeDetokenizer(std::vector<std::string> pieces, std::vector<int32_t> special = {});
  std::unique_ptr<DetokenizerStream> start(std::span<const int32_t> prompt_token_ids,
                                           bool skip_special_tokens) const override;

 private:
  std::vector<std::string> pieces_;
  std::vector<int32_t> special_;
};

}  // namespace omni::engine::testing
