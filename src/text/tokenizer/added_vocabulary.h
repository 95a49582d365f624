// Added tokens (special tokens such as <|im_end|> and extra ones such as <think>) and how they
// are found in text before anything else runs, as Hugging Face tokenizers' AddedVocabulary
// does: leftmost-longest matching, first of the tokens with normalized=false on the raw text,
// then of those with normalized=true on each normalized piece in between; lstrip/rstrip take
// the whitespace beside a match into it; single_word rejects a match inside a word.
//
// Thread-safety: immutable after construction; split() may run on many threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace omni::text {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;      // skipped by decode(skip_special_tokens=true)
  bool normalized = false;   // matched in normalized text rather than raw text
  bool lstrip = false;       // takes the whitespace before it
  bool rstrip = false;       // takes the whitespace after it
  bool single_word = false;  // matches only between non-word characters
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // When `split_special_tokens` is set, special tokens are not matched at all (their text is
  // tokenized as ordinary text), as with transformers' split_special_tokens.
  AddedVocabulary(std::vector<AddedToken> tokens, bool split_special_tokens);

  // One piece of a split: a token (id >= 0) or text to tokenize further (id == -1).
  struct Piece {
    std::string_view text;
    int32_t id = -1;
  };
  // Splits `text` (valid UTF-8) around the tokens of the given kind (normalized or not).
  // The text pieces are views into `text`; empty text pieces are left out.
  void split(std::string_view text, bool normalized, std::vector<Piece>& out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool has_normalized_tokens() const { return !by_first_byte_[1].empty(); }

 private:
  // For each kind (raw, normalized) and first byte, the indices of the tokens starting with it.
  std::array<std::vector<std::vector<size_t>>, 2> by_first_byte_;
  std::vector<AddedToken> tokens_;
  bool split_special_tokens_ = false;
};

}  // namespace omni::text
