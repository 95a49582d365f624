#include "server/request_fields.h"

#include <algorithm>

#include "base/json_dump.h"
#include "server/openai_error.h"

namespace omni::server {

std::string brief(const Json& value) {
  std::string text = dump_for_message(value);
  if (text.size() > 60) {
    size_t cut = 57;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a code point
    text = text.substr(0, cut) + "...";
  }
  return text;
}

namespace {

// The deepest nesting of arrays and objects in JSON text (brackets inside strings do not count);
// stops counting past `limit`. Malformed text is left to the parser.
int nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) break;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

Json parse_request_body(std::string_view body) {
  if (nesting_depth(body, kMaxRequestJsonDepth) > kMaxRequestJsonDepth) {
    throw_invalid_field("body", "the request body nests arrays and objects more than {} levels deep",
                        kMaxRequestJsonDepth);
  }
  Json json;
  try {
    json = parse_json(body, "request body");
  } catch (const Error& e) {
    throw InvalidField("body", e.what());
  }
  if (!json.is_object())
    throw_invalid_field("body", "the request body must be a JSON object, got {}", json.type_name());
  return json;
}

const Json* FieldReader::get(std::string_view name) const {
  auto it = object_.find(name);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool FieldReader::has(std::string_view name) const { return get(name) != nullptr; }

std::optional<bool> FieldReader::boolean(std::string_view name) const {
  const Json* value = get(name);
  if (!value) return std::nullopt;
  if (!value->is_boolean())
    throw_invalid_field(path(name), "'{}' must be a boolean, got {}", path(name), brief(*value));
  return value->get<bool>();
}

std::optional<int64_t> FieldReader::integer(std::string_view name, int64_t min, int64_t max) const {
  const Json* value = get(name);
  if (!value) return std::nullopt;
  if (!value->is_number_integer()) {
    throw_invalid_field(path(name), "'{}' must be an integer, got {}", path(name), brief(*value));
  }
  int64_t v = value->is_number_unsigned() && value->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())
                  ? std::numeric_limits<int64_t>::max()
                  : value->get<int64_t>();
  if (v < min || v > max) {
    if (max == std::numeric_limits<int64_t>::max()) {
      throw_invalid_field(path(name), "'{}' must be at least {}, got {}", path(name), min, v);
    }
    throw_invalid_field(path(name), "'{}' must be between {} and {}, got {}", path(name), min, max, v);
  }
  return v;
}

std::optional<double> FieldReader::number(std::string_view name, double min, double max, bool min_exclusive) const {
  const Json* value = get(name);
  if (!value) return std::nullopt;
  if (!value->is_number()) throw_invalid_field(path(name), "'{}' must be a number, got {}", path(name), brief(*value));
  double v = value->get<double>();
  bool low = min_exclusive ? v <= min : v < min;
  if (low || v > max) {
    throw_invalid_field(path(name), "'{}' must be in {}{}, {}], got {}", path(name), min_exclusive ? "(" : "[", min,
                        max, v);
  }
  return v;
}

std::optional<std::string> FieldReader::string(std::string_view name) const {
  const Json* value = get(name);
  if (!value) return std::nullopt;
  if (!value->is_string()) throw_invalid_field(path(name), "'{}' must be a string, got {}", path(name), brief(*value));
  return value->get<std::string>();
}

std::optional<std::vector<std::string>> FieldReader::strings(std::string_view name) const {
  const Json* value = get(name);
  if (!value) return std::nullopt;
  if (value->is_string()) return std::vector<std::string>{value->get<std::string>()};
  if (value->is_array()) {
    std::vector<std::string> out;
    for (const Json& item : *value) {
      if (!item.is_string()) break;
      out.push_back(item.get<std::string>());
    }
    if (out.size() == value->size()) return out;
  }
  throw_invalid_field(path(name), "'{}' must be a string or a list of strings, got {}", path(name), brief(*value));
}

std::optional<std::vector<int64_t>> FieldReader::integers(std::string_view name) const {
  const Json* value = get(name);
  if (!value) return std::nullopt;
  if (value->is_array()) {
    std::vector<int64_t> out;
    for (const Json& item : *value) {
      if (!item.is_number_integer()) break;
      out.push_back(item.get<int64_t>());
    }
    if (out.size() == value->size()) return out;
  }
  throw_invalid_field(path(name), "'{}' must be a list of integers, got {}", path(name), brief(*value));
}

const Json* FieldReader::object(std::string_view name) const {
  const Json* value = get(name);
  if (value && !value->is_object()) {
    throw_invalid_field(path(name), "'{}' must be an object, got {}", path(name), brief(*value));
  }
  return value;
}

const Json* FieldReader::array(std::string_view name) const {
  const Json* value = get(name);
  if (value && !value->is_array()) {
    throw_invalid_field(path(name), "'{}' must be a list, got {}", path(name), brief(*value));
  }
  return value;
}

}  // namespace omni::server
