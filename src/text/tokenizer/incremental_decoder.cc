#include "text/tokenizer/incremental_decoder.h"

#include "text/tokenizer/utf8.h"

namespace omni::text {

std::string IncrementalDecoder::push(int32_t id) {
  if (!(skip_special_tokens_ && tokenizer_->is_special(id))) pending_ += tokenizer_->token_bytes(id);
  return take_complete();
}

std::string IncrementalDecoder::push(std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    if (!(skip_special_tokens_ && tokenizer_->is_special(id))) pending_ += tokenizer_->token_bytes(id);
  }
  return take_complete();
}

std::string IncrementalDecoder::take_complete() {
  // Only a truncated character at the end can still change meaning; invalid bytes before it
  // decode to U+FFFD whatever comes next, exactly as a full decode would.
  const size_t ready = pending_.size() - utf8::incomplete_suffix_length(pending_);
  if (ready == 0) return {};
  std::string text;
  utf8::append_lossy(std::string_view(pending_).substr(0, ready), text);
  pending_.erase(0, ready);
  return text;
}

std::string IncrementalDecoder::finish() {
  std::string text;
  utf8::append_lossy(pending_, text);
  pending_.clear();
  return text;
}

}  // namespace omni::text
