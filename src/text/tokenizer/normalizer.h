// Unicode normalization of the text between added tokens (tokenizer.json's "normalizer").
// Only the four Unicode normalization forms (and sequences of them) exist in the byte-level
// tokenizers we load; any other normalizer is rejected when the tokenizer is loaded.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"

namespace omni::text {

enum class NormalizationForm { kNfc, kNfd, kNfkc, kNfkd };

class Normalizer {
 public:
  // No normalization.
  Normalizer() = default;
  explicit Normalizer(std::vector<NormalizationForm> forms) : forms_(std::move(forms)) {}

  // Reads tokenizer.json's "normalizer" (null, NFC/NFD/NFKC/NFKD or a Sequence of them). Throws
  // omni::Error(kLoadFailed) naming `source` and the unsupported type.
  static Normalizer from_json(const Json& spec, std::string_view source);

  bool empty() const { return forms_.empty(); }
  // `text` must be valid UTF-8. Thread-safe.
  std::string normalize(std::string_view text) const;

 private:
  std::vector<NormalizationForm> forms_;
};

}  // namespace omni::text
