// UTF-8 helpers the tokenizer needs: validation, lossy decoding of token bytes, the boundary
// of a trailing incomplete character, and the Unicode character classes Hugging Face
// tokenizers uses for added-token flags. All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace omni::text::utf8 {

// The byte offset of the first invalid UTF-8 sequence in `text`, or nullopt when it is valid.
std::optional<size_t> find_invalid(std::string_view text);

// Appends `bytes` to `out`, replacing each maximal invalid subsequence with U+FFFD exactly as
// Rust's String::from_utf8_lossy (and so Hugging Face tokenizers' decode) does.
void append_lossy(std::string_view bytes, std::string& out);

// The length of the suffix of `bytes` that is a proper prefix of a valid UTF-8 sequence (a
// character cut short; 0 to 3 bytes). Everything before it decodes the same whatever follows.
size_t incomplete_suffix_length(std::string_view bytes);

// Decodes the code point that starts at `pos` of valid UTF-8 and advances `pos` past it.
char32_t next_code_point(std::string_view text, size_t& pos);
// Decodes the code point that ends at `end` of valid UTF-8 and moves `end` to its first byte.
char32_t previous_code_point(std::string_view text, size_t& end);

void append_code_point(char32_t cp, std::string& out);

// Unicode White_Space (Rust's char::is_whitespace).
bool is_whitespace(char32_t cp);
// A regex \w character as Rust's regex crate defines it: letters, marks, decimal digits,
// connector punctuation and the joiners.
bool is_word_char(char32_t cp);

}  // namespace omni::text::utf8
