#include "base/json_long_strings.h"

#include <charconv>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace omni {
namespace {

// What a placeholder holds: this prefix (a control character, which JSON text must escape, and a
// random number drawn once per process, so that no request can spell it by chance), then the
// index of the string it stands for.
const std::string& placeholder_prefix() {
  static const std::string prefix = [] {
    std::random_device device;
    const uint64_t nonce = (static_cast<uint64_t>(device()) << 32) ^ device();
    return "\x01long-string-" + std::to_string(nonce) + ":";
  }();
  return prefix;
}

struct Lifted {
  std::string text;                       // the JSON with placeholders; empty when nothing was lifted
  std::vector<std::string_view> strings;  // the lifted strings' contents, by index
};

bool printable_ascii(std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

Lifted lift(std::string_view text) {
  Lifted out;
  const std::string& prefix = placeholder_prefix();
  size_t copied = 0, i = 0;
  const size_t n = text.size();
  while (i < n) {
    if (text[i] != '"') {
      ++i;
      continue;
    }
    // The string starting at i: its closing quote is the first '"' not escaped.
    size_t j = i + 1;
    bool escapes = false;
    size_t end = std::string_view::npos;
    while (j < n) {
      const void* quote = std::memchr(text.data() + j, '"', n - j);
      if (!quote) break;
      const size_t q = static_cast<const char*>(quote) - text.data();
      const void* slash = std::memchr(text.data() + j, '\\', q - j);
      if (!slash) {
        end = q;
        break;
      }
      escapes = true;
      j = static_cast<size_t>(static_cast<const char*>(slash) - text.data()) + 2;  // past the escaped character
    }
    if (end == std::string_view::npos) break;  // unterminated: the parser reports it
    const std::string_view content = text.substr(i + 1, end - i - 1);
    size_t next = end + 1;
    while (next < n && (text[next] == ' ' || text[next] == '\t' || text[next] == '\n' || text[next] == '\r')) ++next;
    const bool key = next < n && text[next] == ':';
    if (!escapes && !key && content.size() >= kLongJsonString && printable_ascii(content)) {
      out.text.append(text.substr(copied, i - copied));
      // The placeholder's control character escaped, as JSON text requires.
      out.text += "\"\\u0001";
      out.text.append(prefix, 1);
      out.text += std::to_string(out.strings.size());
      out.text += '"';
      out.strings.push_back(content);
      copied = end + 1;
    }
    i = end + 1;
  }
  if (!out.strings.empty()) out.text.append(text.substr(copied));
  return out;
}

template <class J>
void put_back(J& root, const std::vector<std::string_view>& strings) {
  const std::string& prefix = placeholder_prefix();
  size_t left = strings.size();
  std::vector<J*> pending{&root};
  while (!pending.empty() && left > 0) {
    J* value = pending.back();
    pending.pop_back();
    if (value->is_string()) {
      std::string& s = value->template get_ref<std::string&>();
      if (s.size() <= prefix.size() || s.compare(0, prefix.size(), prefix) != 0) continue;
      // A placeholder is the prefix and a whole index; anything else is the client's own string.
      size_t index = 0;
      const char* end = s.data() + s.size();
      if (std::from_chars(s.data() + prefix.size(), end, index).ptr == end && index < strings.size()) {
        s.assign(strings[index]);
        --left;
      }
    } else if (value->is_structured()) {
      for (auto& child : *value) pending.push_back(&child);
    }
  }
}

template <class J>
J parse_with_long_strings(std::string_view text) {
  const Lifted lifted = lift(text);
  if (lifted.strings.empty()) return J::parse(text);
  J parsed;
  try {
    parsed = J::parse(lifted.text);
  } catch (const typename J::exception&) {
    return J::parse(text);  // throws the error at its place in the original text
  }
  put_back(parsed, lifted.strings);
  return parsed;
}

}  // namespace

Json parse_json_with_long_strings(std::string_view text) { return parse_with_long_strings<Json>(text); }

OrderedJson parse_ordered_json_with_long_strings(std::string_view text) {
  return parse_with_long_strings<OrderedJson>(text);
}

}  // namespace omni
