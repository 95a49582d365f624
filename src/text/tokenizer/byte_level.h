// The byte-level alphabet of GPT-2 style BPE (Hugging Face's ByteLevel pre-tokenizer and
// decoder): every byte maps to one printable code point, so that vocabulary entries are
// text. Printable Latin-1 bytes map to themselves, the other 68 to U+0100 onwards.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace omni::text::byte_level {

// The code point that stands for `byte`.
char32_t byte_to_code_point(unsigned char byte);

// The byte a code point stands for, or nullopt for a code point outside the alphabet.
std::optional<unsigned char> code_point_to_byte(char32_t cp);

// Maps every byte of `bytes` to its code point, UTF-8 encoded (the vocabulary's spelling).
std::string encode(std::string_view bytes);

// The raw bytes a vocabulary entry spells, or nullopt when one of its code points is outside
// the alphabet. `token` must be valid UTF-8.
std::optional<std::string> decode(std::string_view token);

}  // namespace omni::text::byte_level
