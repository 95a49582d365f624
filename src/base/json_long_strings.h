// Parsing JSON that holds long strings (the base64 media of a request body) without nlohmann's
// lexer walking each of their bytes, which costs about 7 ns a byte (4.8 ms for the 650 KB of a
// 10 s WAV reference on the dev VM). Before the parse, every string value of at least
// kLongJsonString bytes of printable ASCII without escapes (base64 and URLs are) is cut out of the
// text and a short placeholder stands in; after it, the placeholders are replaced by the strings.
// The result is what Json::parse gives; a syntax error is reported from the original text, so
// its message and position are nlohmann's own. Other strings (keys, escapes, non-ASCII) are left
// to the parser.
#pragma once

#include <cstddef>
#include <string_view>

#include "base/json.h"

namespace omni {

inline constexpr size_t kLongJsonString = 1024;

// As Json::parse(text) / OrderedJson::parse(text), including the exceptions they throw.
Json parse_json_with_long_strings(std::string_view text);
OrderedJson parse_ordered_json_with_long_strings(std::string_view text);

}  // namespace omni
