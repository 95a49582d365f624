// JSON helpers on nlohmann::json: reading files and strings with errors that name the source.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace omni {

using Json = nlohmann::json;
// Keeps keys in the order they were written, for output a person reads (omnistage config).
using OrderedJson = nlohmann::ordered_json;

// Parses `text` (long strings quickly: base/json_long_strings.h); a syntax error throws
// omni::Error(kInvalidArgument) that names `source` (a flag, a request field) and the line and
// column of the error.
Json parse_json(std::string_view text, std::string_view source);

// Reads and parses a JSON file; errors name the file (kNotFound if missing, kLoadFailed on
// a syntax error, with line and column).
Json read_json_file(const std::filesystem::path& path);

// Reads a whole file into a string; kNotFound if it cannot be opened.
std::string read_text_file(const std::filesystem::path& path);

}  // namespace omni
