// Pre-tokenization: splits normalized text into the words BPE encodes (tokenizer.json's
// "pre_tokenizer"). Supported: Split (a regex or a literal string, every split behavior,
// invert) and ByteLevel (add_prefix_space, use_regex with GPT-2's regex), alone or in a
// Sequence. Regexes run on PCRE2 (UTF + UCP, JIT-compiled) with `\s` widened to Oniguruma's
// Unicode White_Space set (it adds U+0085), since Hugging Face tokenizers runs them on Oniguruma.
//
// Thread-safety: an instance is immutable; split() may run on many threads at once.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/json.h"

namespace omni::text {

// One compiled regex. Owns the PCRE2 code (freed on destruction); move-only.
class TokenizerRegex {
 public:
  // `pattern` in Oniguruma/Python syntax; `literal` matches the text as written. Throws
  // omni::Error(kLoadFailed) naming `source`, the pattern and PCRE2's message.
  TokenizerRegex(std::string_view pattern, bool literal, std::string_view source);
  ~TokenizerRegex();
  TokenizerRegex(TokenizerRegex&&) noexcept;
  TokenizerRegex& operator=(TokenizerRegex&&) noexcept;
  TokenizerRegex(const TokenizerRegex&) = delete;
  TokenizerRegex& operator=(const TokenizerRegex&) = delete;

  // Replaces `matches` with the [start, end) byte ranges of every non-empty, non-overlapping
  // match in `text` (valid UTF-8), left to right.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

class PreTokenizer {
 public:
  // Reads tokenizer.json's "pre_tokenizer". Throws omni::Error(kLoadFailed) naming `source`
  // and the unsupported type or option.
  static PreTokenizer from_json(const Json& spec, std::string_view source);
  // The pre-tokenizer of the vocab.json + merges.txt layout (Qwen2Tokenizer): the Qwen2 regex,
  // isolated, then ByteLevel without prefix space.
  static PreTokenizer qwen2();

  // Splits `text` into words; each word is either a view into `text` or, when a prefix
  // space was added, a string kept in `storage` (which must outlive the words).
  void split(std::string_view text, std::vector<std::string_view>& words, std::deque<std::string>& storage) const;

  // Whether the chain contains a ByteLevel step (the only kind of BPE this tokenizer runs).
  bool byte_level() const { return byte_level_; }

 private:
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct Step {
    std::shared_ptr<const TokenizerRegex> regex;  // null: no split (ByteLevel without regex)
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;
  };
  static void append_steps(const Json& spec, std::string_view source, PreTokenizer& out);
  static void split_one(const Step& step, std::string_view piece, std::vector<std::string_view>& out);

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace omni::text
