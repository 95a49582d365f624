#include "text/tokenizer/byte_level.h"

#include "text/tokenizer/utf8.h"

namespace omni::text::byte_level {
namespace {

struct Alphabet {
  std::array<char32_t, 256> to_code_point{};
  std::array<int, 324> to_byte{};  // every code point of the alphabet is below 256 + 68

  Alphabet() {
    to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_code_point[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_code_point[b]] = b;
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet kAlphabet;
  return kAlphabet;
}

}  // namespace

char32_t byte_to_code_point(unsigned char byte) { return alphabet().to_code_point[byte]; }

std::optional<unsigned char> code_point_to_byte(char32_t cp) {
  const Alphabet& a = alphabet();
  if (cp >= a.to_byte.size() || a.to_byte[cp] < 0) return std::nullopt;
  return static_cast<unsigned char>(a.to_byte[cp]);
}

std::string encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) utf8::append_code_point(byte_to_code_point(static_cast<unsigned char>(c)), out);
  return out;
}

std::optional<std::string> decode(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    const auto byte = code_point_to_byte(utf8::next_code_point(token, pos));
    if (!byte) return std::nullopt;
    out.push_back(static_cast<char>(*byte));
  }
  return out;
}

}  // namespace omni::text::byte_level
