// How the engine turns sampled tokens into text, when it has a tokenizer. The engine takes an
// optional Detokenizer: with one, outputs carry text and stop strings work; without one, outputs
// carry token ids only and a request with stop strings is rejected.
// Implementations: TokenizerDetokenizer (engine/tokenizer_detokenizer.h) over the model's tokenizer,
// and test doubles.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace omni::engine {

// The text of one sequence's output, built token by token. Engine thread only.
class DetokenizerStream {
 public:
  virtual ~DetokenizerStream() = default;
  // Appends one sampled token and returns the text that became final with it: possibly empty (a
  // token ending inside a multi-byte character, a skipped special token), possibly more than the
  // token's own text (when it completes an earlier partial character).
  virtual std::string push(int32_t token_id) = 0;
};

class Detokenizer {
 public:
  virtual ~Detokenizer() = default;
  // Starts the output text of a sequence after `prompt_token_ids` (context for tokenizers whose
  // decoding depends on the preceding tokens). Called on the engine thread; must be callable from
  // any thread that owns an engine, so implementations keep no mutable shared state.
  virtual std::unique_ptr<DetokenizerStream> start(std::span<const int32_t> prompt_token_ids,
                                                   bool skip_special_tokens) const = 0;
};

}  // namespace omni::engine
