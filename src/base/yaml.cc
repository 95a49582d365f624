#include "base/yaml.h"

#include <cstdlib>
#include <regex>

#include "base/error.h"

namespace omni {

namespace {

YAML::Node parse_or_throw(const std::string& text, std::string_view source) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw_error(ErrorCode::kInvalidConfig, "{}:{}:{}: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
}

Json scalar_to_json(const YAML::Node& node) {
  const std::string& text = node.Scalar();
  // Quoted scalars carry the tag "!"; only plain ones are resolved to other types.
  if (node.Tag() == "!") return text;
  static const std::regex kNull("^(null|Null|NULL|~|)$");
  static const std::regex kTrue("^(true|True|TRUE)$");
  static const std::regex kFalse("^(false|False|FALSE)$");
  static const std::regex kInt("^[-+]?[0-9]+$");
  static const std::regex kFloat(R"(^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$)");
  static const std::regex kInf(R"(^[-+]?\.(inf|Inf|INF)$)");
  static const std::regex kNan(R"(^\.(nan|NaN|NAN)$)");
  if (std::regex_match(text, kNull)) return nullptr;
  if (std::regex_match(text, kTrue)) return true;
  if (std::regex_match(text, kFalse)) return false;
  if (std::regex_match(text, kInt)) {
    errno = 0;
    char* end = nullptr;
    long long value = std::strtoll(text.c_str(), &end, 10);
    if (errno == 0) return value;
  }
  if (std::regex_match(text, kFloat)) return std::strtod(text.c_str(), nullptr);
  if (std::regex_match(text, kInf)) return text[0] == '-' ? -HUGE_VAL : HUGE_VAL;
  if (std::regex_match(text, kNan)) return std::nan("");
  return text;
}

}  // namespace

YAML::Node load_yaml_file(const std::filesystem::path& path) {
  return parse_or_throw(read_text_file(path), path.string());
}

YAML::Node parse_yaml(std::string_view text, std::string_view source) {
  return parse_or_throw(std::string(text), source);
}

Json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return nullptr;
    case YAML::NodeType::Scalar:
      return scalar_to_json(node);
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const auto& item : node) out.push_back(yaml_to_json(item));
      return out;
    }
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& item : node) {
        if (!item.first.IsScalar()) {
          throw_error(ErrorCode::kInvalidConfig, "line {}:{}: mapping keys must be plain strings",
                      item.first.Mark().line + 1, item.first.Mark().column + 1);
        }
        out[item.first.Scalar()] = yaml_to_json(item.second);
      }
      return out;
    }
  }
  return nullptr;
}

}  // namespace omni
