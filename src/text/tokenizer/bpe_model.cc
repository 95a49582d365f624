#include "text/tokenizer/bpe_model.h"

#include <mutex>
#include <queue>

#include "base/error.h"
#include "text/tokenizer/byte_level.h"

namespace omni::text {

BpeModel::BpeModel(TokenIdMap vocab, const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
                   const std::function<std::string(size_t index)>& merge_location)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges) {
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_.find(byte_level::encode(std::string(1, static_cast<char>(b))));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
  merges_.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto l = vocab_.find(left);
    const auto r = vocab_.find(right);
    joined.assign(left).append(right);
    const auto j = vocab_.find(joined);
    if (l == vocab_.end() || r == vocab_.end() || j == vocab_.end()) {
      throw_error(ErrorCode::kLoadFailed, "{}: merge '{} {}': '{}' is not in the vocabulary", merge_location(rank),
                  left, right,
                  l == vocab_.end()   ? left
                  : r == vocab_.end() ? right
                                      : joined);
    }
    // A repeated merge keeps its first (best) rank, as Hugging Face does.
    merges_.try_emplace(pair_key(l->second, r->second), Merge{static_cast<int32_t>(rank), j->second});
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() <= kMaxCachedWordBytes) {
    {
      std::shared_lock lock(cache_->mutex);
      const auto it = cache_->ids.find(word);
      if (it != cache_->ids.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    const size_t first = out.size();
    merge(word, out);
    std::unique_lock lock(cache_->mutex);
    if (cache_->ids.size() < kCacheCapacity)
      cache_->ids.try_emplace(std::string(word), out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
    return;
  }
  merge(word, out);
}

void BpeModel::merge(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    const auto whole = vocab_.find(byte_level::encode(word));
    if (whole != vocab_.end()) {
      out.push_back(whole->second);
      return;
    }
  }
  // Symbols form a linked list over the word's bytes; a merged-away symbol gets id -1.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (char c : word) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(c)];
    if (id < 0) continue;
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push_pair = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    const auto it = merges_.find(pair_key(symbols[pos].id, symbols[next].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.id < 0 || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // The pair may have changed since it was queued: only merge what is still there.
    const auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    left.id = top.new_id;
    right.id = -1;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (const Symbol& s : symbols) {
    if (s.id >= 0) out.push_back(s.id);
  }
}

}  // namespace omni::text
