// The engine's Detokenizer over a model's tokenizer: each sequence's text comes from a
// text::IncrementalDecoder, which holds back a character split across tokens until it is complete.
// It borrows the Tokenizer, which must outlive it and every stream it starts.
#pragma once

#include "engine/detokenizer.h"
#include "text/tokenizer/tokenizer.h"

namespace omni::engine {

class TokenizerDetokenizer : public Detokenizer {
 public:
  explicit TokenizerDetokenizer(const text::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Byte-level BPE text does not depend on the tokens before it, so the prompt is not needed.
  std::unique_ptr<DetokenizerStream> start(std::span<const int32_t> prompt_token_ids,
                                           bool skip_special_tokens) const override;

 private:
  const text::Tokenizer& tokenizer_;
};

}  // namespace omni::engine
