#include "text/tokenizer/added_vocabulary.h"

#include "text/tokenizer/utf8.h"

namespace omni::text {

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, bool split_special_tokens)
    : tokens_(std::move(tokens)), split_special_tokens_(split_special_tokens) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    if (t.content.empty()) continue;
    auto& table = by_first_byte_[t.normalized ? 1 : 0];
    if (table.empty()) table.resize(256);
    table[static_cast<unsigned char>(t.content[0])].push_back(i);
  }
}

void AddedVocabulary::split(std::string_view text, bool normalized, std::vector<Piece>& out) const {
  const auto& table = by_first_byte_[normalized ? 1 : 0];
  if (table.empty()) {
    if (!text.empty()) out.push_back({text, -1});
    return;
  }
  size_t emitted = 0;  // end of what `out` covers
  size_t pos = 0;
  while (pos < text.size()) {
    // The longest token starting here (leftmost-longest).
    const AddedToken* best = nullptr;
    for (size_t index : table[static_cast<unsigned char>(text[pos])]) {
      const AddedToken& t = tokens_[index];
      if (text.compare(pos, t.content.size(), t.content) == 0 && (!best || t.content.size() > best->content.size())) {
        best = &t;
      }
    }
    if (!best) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = pos + best->content.size();
    pos = stop;  // a rejected match is still consumed, as the Aho-Corasick iteration does
    if (split_special_tokens_ && best->special) continue;
    if (best->single_word) {
      bool word_before = false, word_after = false;
      if (start > 0) {
        size_t end = start;
        word_before = utf8::is_word_char(utf8::previous_code_point(text, end));
      }
      if (stop < text.size()) {
        size_t next = stop;
        word_after = utf8::is_word_char(utf8::next_code_point(text, next));
      }
      if (word_before || word_after) continue;
    }
    if (best->lstrip) {
      while (start > 0) {
        size_t before = start;
        if (!utf8::is_whitespace(utf8::previous_code_point(text, before))) break;
        start = before;
      }
    }
    if (best->rstrip) {
      while (stop < text.size()) {
        size_t after = stop;
        if (!utf8::is_whitespace(utf8::next_code_point(text, after))) break;
        stop = after;
      }
      pos = stop;
    }
    if (start > emitted) out.push_back({text.substr(emitted, start - emitted), -1});
    out.push_back({text.substr(start, stop - start), best->id});
    emitted = stop;
  }
  if (emitted < text.size()) out.push_back({text.substr(emitted), -1});
}

}  // namespace omni::text
