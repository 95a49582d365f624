// Streaming detokenization: turns generated ids into text one token at a time without ever
// emitting part of a UTF-8 character. A character split over several byte tokens (common for
// CJK and emoji) is held back until its last byte arrives. The concatenation of everything
// push() and finish() return equals Tokenizer::decode() of all the ids.
//
// Thread-safety: one decoder per sequence, used by one thread at a time. It borrows the
// Tokenizer, which must outlive it.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "text/tokenizer/tokenizer.h"

namespace omni::text {

class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false)
      : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

  // Adds tokens; returns the text they complete (possibly empty).
  std::string push(int32_t id);
  std::string push(std::span<const int32_t> ids);

  // Ends the stream: returns what is still held back, an incomplete character becoming
  // U+FFFD. The decoder is then empty and may start a new stream.
  std::string finish();

  // Bytes held back because they do not yet form a complete character.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string take_complete();

  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;
};

}  // namespace omni::text
