// The length of UTF-8 text in code points, as the OpenAI API and vLLM-Omni count characters
// (limits on text and instructions, logprob text offsets). Pure and thread-safe.
#pragma once

#include <cstddef>
#include <string_view>

namespace omni {

// The number of bytes of `text` that start a code point, i.e. are not continuation bytes
// (10xxxxxx). On valid UTF-8 that is the number of code points; invalid input is counted the same
// way, never rejected.
constexpr size_t code_points(std::string_view text) {
  size_t count = 0;
  for (char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

}  // namespace omni
