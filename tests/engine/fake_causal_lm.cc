#include "fake_causal_lm.h"

#include <algorithm>

#include "base/error.h"
#include "base/splitmix64.h"

namespace omni::engine::testing {

using model::kKvBlockSize;

FakeCausalLm::FakeCausalLm(int vocab_size, std::vector<int32_t> eos_token_ids, int max_positions) {
  info_.vocab_size = vocab_size;
  info_.max_position_embeddings = max_positions;
  info_.eos_token_ids = std::move(eos_token_ids);
}

void FakeCausalLm::init_kv_cache(int num_blocks) {
  num_blocks_ = num_blocks;
  slot_tokens_.assign(static_cast<size_t>(num_blocks) * kKvBlockSize, -1);
  slot_positions_.assign(static_cast<size_t>(num_blocks) * kKvBlockSize, -1);
}

std::vector<float> FakeCausalLm::logits_for(std::span<const int32_t> history) const {
  uint64_t h = 0x12345;
  for (int32_t t : history) h = splitmix64_mix(h ^ static_cast<uint32_t>(t)) + kSplitmix64Increment;
  std::vector<float> logits(info_.vocab_size);
  for (int v = 0; v < info_.vocab_size; ++v) {
    uint64_t r = splitmix64_mix(h + static_cast<uint64_t>(v) * 0x632be59bd9b4e019ull);
    logits[v] = static_cast<float>(static_cast<double>(r >> 40) / static_cast<double>(1ull << 24) * 8.0 - 4.0);
  }
  if (preferred) logits[preferred(history)] += boost;
  return logits;
}

void FakeCausalLm::forward(const model::ForwardBatch& batch, std::vector<float>& logits) {
  if (on_forward) on_forward();
  if (batch.token_ids.size() != batch.positions.size()) throw_error(ErrorCode::kInternal, "tokens/positions differ");
  Batch record;
  logits.clear();
  for (const model::SequenceSlice& s : batch.seqs) {
    record.push_back({s.query_len, s.context_len, s.wants_logits});
    int total = s.context_len + s.query_len;
    if (static_cast<int>(s.block_table.size()) * kKvBlockSize < total) {
      throw_error(ErrorCode::kInternal, "block table of {} blocks cannot hold {} tokens", s.block_table.size(), total);
    }
    auto slot = [&](int position) {
      int32_t block = s.block_table[position / kKvBlockSize];
      if (block < 0 || block >= num_blocks_) throw_error(ErrorCode::kInternal, "block {} out of range", block);
      return static_cast<size_t>(block) * kKvBlockSize + position % kKvBlockSize;
    };
    for (int i = 0; i < s.query_len; ++i) {
      int32_t token = batch.token_ids[s.query_start + i];
      int32_t position = batch.positions[s.query_start + i];
      if (position != s.context_len + i)
        throw_error(ErrorCode::kInternal, "position {} should be {}", position, s.context_len + i);
      if (token < 0 || token >= info_.vocab_size) {
        throw_error(ErrorCode::kInvalidArgument, "token {} outside the vocabulary", token);
      }
      slot_tokens_[slot(position)] = token;
      slot_positions_[slot(position)] = position;
    }
    if (!s.wants_logits) continue;
    std::vector<int32_t> history(total);
    for (int p = 0; p < total; ++p) {
      if (slot_positions_[slot(p)] != p) {
        throw_error(ErrorCode::kInternal, "the slot for position {} holds position {}", p, slot_positions_[slot(p)]);
      }
      history[p] = slot_tokens_[slot(p)];
    }
    std::vector<float> row = logits_for(history);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  batches_.push_back(std::move(record));
}

namespace {

class FakeStream : public DetokenizerStream {
 public:
  FakeStream(const std::vector<std::string>& pieces, const std::vector<int32_t>& special, bool skip)
      : pieces_(pieces), special_(special), skip_(skip) {}

  std::string push(int32_t token_id) override {
    bool special = std::find(special_.begin(), special_.end(), token_id) != special_.end();
    if (!(special && skip_)) pending_ += pieces_.at(token_id);
    // Release everything up to the last complete UTF-8 character.
    size_t end = pending_.size();
    size_t lead = end;
    while (lead > 0 && (static_cast<unsigned char>(pending_[lead - 1]) & 0xC0) == 0x80) --lead;
    if (lead > 0) {
      unsigned char c = static_cast<unsigned char>(pending_[lead - 1]);
      size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      if (end - (lead - 1) < len) end = lead - 1;
    }
    std::string out = pending_.substr(0, end);
    pending_.erase(0, end);
    return out;
  }

 private:
  const std::vector<std::string>& pieces_;
  const std::vector<int32_t>& special_;
  bool skip_;
  std::string pending_;
};

}  // namespace

FakeDetokenizer::FakeDetokenizer(std::vector<std::string> pieces, std::vector<int32_t> special)
    : pieces_(std::move(pieces)), special_(std::move(special)) {}

std::unique_ptr<DetokenizerStream> FakeDetokenizer::start(std::span<const int32_t>, bool skip_special_tokens) const {
  return std::make_unique<FakeStream>(pieces_, special_, skip_special_tokens);
}

}  // namespace omni::engine::testing
