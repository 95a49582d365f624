#include "text/tokenizer/utf8.h"

#include <utf8proc.h>

namespace omni::text::utf8 {
namespace {

// The length of the valid UTF-8 sequence starting at `pos`, or 0 when the bytes there are not
// one. Sets `needed` to the full length the lead byte announces (when it is a lead byte), so
// that callers can tell a truncated sequence from a broken one.
size_t valid_sequence_length(std::string_view s, size_t pos, size_t& needed) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  needed = 1;
  if (b0 < 0x80) return 1;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    needed = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    needed = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    needed = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  // The first continuation byte has the lead-specific range, the others the plain one.
  for (size_t i = 1; i < needed; ++i) {
    if (pos + i >= s.size()) return 0;
    const auto b = static_cast<unsigned char>(s[pos + i]);
    if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) return 0;
  }
  return needed;
}

// How many bytes from `pos` form a valid prefix of a sequence (used for the replacement
// policy: a maximal valid prefix of a broken sequence becomes one U+FFFD).
size_t valid_prefix_length(std::string_view s, size_t pos, size_t needed) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 == 0xE0) lo = 0xA0;
  if (b0 == 0xED) hi = 0x9F;
  if (b0 == 0xF0) lo = 0x90;
  if (b0 == 0xF4) hi = 0x8F;
  size_t i = 1;
  for (; i < needed && pos + i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[pos + i]);
    if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) break;
  }
  return i;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace

std::optional<size_t> find_invalid(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t needed = 0;
    const size_t n = valid_sequence_length(text, pos, needed);
    if (n == 0) return pos;
    pos += n;
  }
  return std::nullopt;
}

void append_lossy(std::string_view bytes, std::string& out) {
  size_t pos = 0;
  size_t run_start = 0;
  while (pos < bytes.size()) {
    if (static_cast<unsigned char>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t needed = 0;
    const size_t n = valid_sequence_length(bytes, pos, needed);
    if (n > 0) {
      pos += n;
      continue;
    }
    out.append(bytes.substr(run_start, pos - run_start));
    out.append(kReplacement);
    pos += needed > 1 ? valid_prefix_length(bytes, pos, needed) : 1;
    run_start = pos;
  }
  out.append(bytes.substr(run_start));
}

size_t incomplete_suffix_length(std::string_view bytes) {
  // A truncated character is at most 3 bytes long: look for its lead byte among them.
  const size_t limit = bytes.size() < 3 ? bytes.size() : 3;
  for (size_t back = 1; back <= limit; ++back) {
    const size_t pos = bytes.size() - back;
    const auto b = static_cast<unsigned char>(bytes[pos]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: the lead is further back
    size_t needed = 0;
    if (valid_sequence_length(bytes, pos, needed) > 0) return 0;  // complete
    if (needed > back && valid_prefix_length(bytes, pos, needed) == back) return back;
    return 0;
  }
  return 0;
}

char32_t next_code_point(std::string_view text, size_t& pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  const size_t n = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  char32_t cp = b0 & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(text[pos + i]) & 0x3F);
  pos += n;
  return cp;
}

char32_t previous_code_point(std::string_view text, size_t& end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  size_t pos = start;
  const char32_t cp = next_code_point(text, pos);
  end = start;
  return cp;
}

void append_code_point(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  if (cp == 0x200C || cp == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

}  // namespace omni::text::utf8
