// Byte-level BPE: turns one pre-tokenized word (raw bytes) into vocabulary ids by applying
// merges in rank order, exactly as Hugging Face tokenizers' BPE model does (lowest rank first,
// leftmost first among equal ranks).
//
// Thread-safety: encode_word() may be called from many threads at once; the word cache is
// guarded by a reader-writer lock. The model is immutable after construction.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace omni::text {

// Hashing for maps keyed by std::string that are looked up with a std::string_view.
struct StringHash {
  using is_transparent = void;  // NOLINT(readability-identifier-naming): the standard library's name
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `vocab` maps byte-level spellings to ids; `merges` are pairs of spellings in rank order.
  // With `ignore_merges`, a word that is in the vocabulary as a whole is that one token (as in
  // tokenizer.json's model.ignore_merges). A merge whose parts or result are not in the
  // vocabulary throws omni::Error(kLoadFailed) naming `merge_location(index)` (file and line).
  BpeModel(TokenIdMap vocab, const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
           const std::function<std::string(size_t index)>& merge_location);

  // Appends the ids of `word` (raw bytes, one pre-tokenized piece) to `out`. A byte whose
  // single-byte token is missing from the vocabulary is dropped (there is no unknown token).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  const TokenIdMap& vocab() const { return vocab_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  void merge(std::string_view word, std::vector<int32_t>& out) const;

  TokenIdMap vocab_;
  std::array<int32_t, 256> byte_ids_{};
  std::unordered_map<uint64_t, Merge> merges_;
  bool ignore_merges_ = false;

  // Words seen before, so that frequent words skip the merge loop. Bounded: once full it
  // stops growing (as Hugging Face's cache does); long words are not cached.
  static constexpr size_t kCacheCapacity = 100000;
  static constexpr size_t kMaxCachedWordBytes = 256;
  struct WordCache {
    std::shared_mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> ids;
  };
  std::unique_ptr<WordCache> cache_ = std::make_unique<WordCache>();
};

}  // namespace omni::text
