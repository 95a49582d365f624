// Typed reading of OpenAI request bodies. Every failure is an InvalidField (HTTP 400) that names
// the field and says what was expected. A field that is absent or JSON null reads as "not given",
// as OpenAI's and vLLM's servers treat it.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"

namespace omni::server {

// A value as an error message quotes it: its JSON, cut to 60 bytes (at a code point boundary) so
// that the message stays readable whatever the client sent.
std::string brief(const Json& value);

// Arrays and objects nested deeper than this in a request body are refused (400) before the body
// is parsed: every later step (the chat template's variables, error messages, the stage
// protocol) walks JSON recursively, and a few hundred kilobytes of '[' would overflow its stack.
inline constexpr int kMaxRequestJsonDepth = 128;

// Parses a request body that must be a JSON object, nested at most kMaxRequestJsonDepth deep.
Json parse_request_body(std::string_view body);

// `prefix` is prepended to field names in errors ("messages[0]." for nested objects).
class FieldReader {
 public:
  explicit FieldReader(const Json& object, std::string prefix = "") : object_(object), prefix_(std::move(prefix)) {}

  bool has(std::string_view name) const;
  std::string path(std::string_view name) const { return prefix_ + std::string(name); }

  std::optional<bool> boolean(std::string_view name) const;
  std::optional<int64_t> integer(std::string_view name, int64_t min = std::numeric_limits<int64_t>::min(),
                                 int64_t max = std::numeric_limits<int64_t>::max()) const;
  // `min_exclusive`: the value must be greater than `min` (top_p > 0).
  std::optional<double> number(std::string_view name, double min, double max, bool min_exclusive = false) const;
  std::optional<std::string> string(std::string_view name) const;
  // A string or a list of strings ("stop").
  std::optional<std::vector<std::string>> strings(std::string_view name) const;
  std::optional<std::vector<int64_t>> integers(std::string_view name) const;
  // An object, returned as is.
  const Json* object(std::string_view name) const;
  const Json* array(std::string_view name) const;

 private:
  const Json* get(std::string_view name) const;

  const Json& object_;
  std::string prefix_;
};

}  // namespace omni::server
