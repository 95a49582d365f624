#include "base/base64.h"

#include <array>

#include "base/error.h"

namespace omni {

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<int8_t, 256> decode_table() {
  std::array<int8_t, 256> table{};
  for (auto& value : table) value = -1;
  for (int i = 0; i < 64; ++i) table[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
  return table;
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) | (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                 static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (size_t left = bytes.size() - i; left > 0) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (left == 2) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += left == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view text) {
  static constexpr std::array<int8_t, 256> kTable = decode_table();
  if (text.size() % 4 != 0) {
    throw_error(ErrorCode::kInvalidArgument, "base64: length {} is not a multiple of 4", text.size());
  }
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int padding = 0;
    uint32_t v = 0;
    for (size_t j = 0; j < 4; ++j) {
      const char c = text[i + j];
      int8_t digit = kTable[static_cast<unsigned char>(c)];
      if (c == '=' && last && j >= 2 && (j == 3 || text[i + 3] == '=')) {
        ++padding;
        digit = 0;
      } else if (digit < 0 || padding > 0) {
        throw_error(ErrorCode::kInvalidArgument, "base64: invalid character at position {}", i + j);
      }
      v = (v << 6) | static_cast<uint32_t>(digit);
    }
    out += static_cast<char>(v >> 16);
    if (padding < 2) out += static_cast<char>((v >> 8) & 0xff);
    if (padding < 1) out += static_cast<char>(v & 0xff);
  }
  return out;
}

}  // namespace omni
