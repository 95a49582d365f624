#include "base/json.h"

#include <fstream>
#include <sstream>

#include "base/error.h"
#include "base/json_long_strings.h"

namespace omni {

namespace {

// nlohmann's message without its "[json.exception.parse_error.101] " prefix. Parsing throws
// parse_error for bad syntax and out_of_range (406) for a number too large for a double.
std::string_view describe(const Json::exception& e) {
  std::string_view what = e.what();
  if (auto end = what.find("] "); what.rfind("[json.exception", 0) == 0 && end != std::string_view::npos) {
    what.remove_prefix(end + 2);
  }
  return what;
}

}  // namespace

Json parse_json(std::string_view text, std::string_view source) {
  try {
    return parse_json_with_long_strings(text);
  } catch (const Json::exception& e) {
    throw_error(ErrorCode::kInvalidArgument, "{}: malformed JSON: {}", source, describe(e));
  }
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorCode::kNotFound, "{}: cannot open file", path.string());
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

Json read_json_file(const std::filesystem::path& path) {
  std::string text = read_text_file(path);
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    throw_error(ErrorCode::kLoadFailed, "{}: malformed JSON: {}", path.string(), describe(e));
  }
}

}  // namespace omni
