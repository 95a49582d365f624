#include "text/chat_template/template_value.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "base/error.h"
#include "text/tokenizer/utf8.h"

namespace omni::text::jinja {

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value::Value(bool b) : kind_(Kind::kBool), b_(b) {}
Value::Value(int64_t i) : kind_(Kind::kInt), i_(i) {}
Value::Value(double f) : kind_(Kind::kFloat), f_(f) {}
Value::Value(std::string s) : kind_(Kind::kString), s_(std::make_shared<const std::string>(std::move(s))) {}
namespace {

int nesting_of(int deepest_element) {
  const int nesting = deepest_element + 1;
  if (nesting > kMaxValueNesting) {
    throw TemplateError(fmt::format("a list or dict nested deeper than {} levels", kMaxValueNesting));
  }
  return nesting;
}

// One level of a walk through a value (repr, JSON, comparison). Lists and dicts nest at most
// kMaxValueNesting deep when made, but a namespace can come to hold itself, directly or not.
class WalkLevel {
 public:
  WalkLevel() {
    if (++depth_ > kMaxValueNesting) {
      --depth_;
      throw TemplateError(
          fmt::format("a value nested deeper than {} levels (a namespace that holds itself?)", kMaxValueNesting));
    }
  }
  ~WalkLevel() { --depth_; }
  WalkLevel(const WalkLevel&) = delete;
  WalkLevel& operator=(const WalkLevel&) = delete;

 private:
  static thread_local int depth_;
};

thread_local int WalkLevel::depth_ = 0;

}  // namespace

Value::Value(List list) : kind_(Kind::kList) {
  int deepest = 0;
  for (const Value& e : list) deepest = std::max(deepest, e.nesting_);
  nesting_ = nesting_of(deepest);
  list_ = std::make_shared<const List>(std::move(list));
}

Value::Value(Dict dict) : kind_(Kind::kDict) {
  int deepest = 0;
  for (const auto& [k, v] : dict) deepest = std::max(deepest, v.nesting_);
  nesting_ = nesting_of(deepest);
  dict_ = std::make_shared<Dict>(std::move(dict));
}

Value Value::make_namespace(Dict attributes) {
  Value v(std::move(attributes));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::function(std::string name, Function f) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.fn_ = std::make_shared<const std::pair<std::string, Function>>(std::move(name), std::move(f));
  return v;
}

Value Value::from_json(const OrderedJson& j) { return from_json(j, 0); }

Value Value::from_json(const OrderedJson& j, int depth) {
  if (j.is_structured() && depth >= kMaxValueNesting) {
    throw_error(ErrorCode::kInvalidArgument, "a template variable is JSON nested deeper than {} levels",
                kMaxValueNesting);
  }
  switch (j.type()) {
    case OrderedJson::value_t::null:
      return none();
    case OrderedJson::value_t::boolean:
      return Value(j.get<bool>());
    case OrderedJson::value_t::number_integer:
      return Value(j.get<int64_t>());
    case OrderedJson::value_t::number_unsigned:
      return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case OrderedJson::value_t::number_float:
      return Value(j.get<double>());
    case OrderedJson::value_t::string:
      return Value(j.get<std::string>());
    case OrderedJson::value_t::array: {
      List list;
      list.reserve(j.size());
      for (const auto& e : j) list.push_back(from_json(e, depth + 1));
      return Value(std::move(list));
    }
    case OrderedJson::value_t::object: {
      Dict dict;
      dict.reserve(j.size());
      for (const auto& [k, v] : j.items()) dict.emplace_back(k, from_json(v, depth + 1));
      return Value(std::move(dict));
    }
    default:
      return undefined();
  }
}

const Value* Value::find(std::string_view key) const {
  if (kind_ != Kind::kDict && kind_ != Kind::kNamespace) return nullptr;
  for (const auto& [k, v] : *dict_) {
    if (k == key) return &v;
  }
  return nullptr;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0.0;
    case Kind::kString:
      return !s_->empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string format_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  // The shortest digits that round-trip, laid out as Python's repr does: positional for
  // exponents in [-4, 16), scientific otherwise.
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::stoi(sci.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    out += exponent < 0 ? "e-" : "e+";
    const std::string exp_digits = std::to_string(std::abs(exponent));
    out += (exp_digits.size() < 2 ? "0" : "") + exp_digits;
    return out;
  }
  if (exponent < 0) {
    out += "0.";
    out.append(static_cast<size_t>(-exponent - 1), '0');
    out += digits;
  } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
    out += digits;
    out.append(static_cast<size_t>(exponent) + 1 - digits.size(), '0');
    out += ".0";
  } else {
    out.append(digits, 0, static_cast<size_t>(exponent) + 1);
    out += '.';
    out.append(digits, static_cast<size_t>(exponent) + 1);
  }
  return out;
}

namespace {

std::string python_string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t pos = 0;
  while (pos < s.size()) {
    const char32_t cp = utf8::next_code_point(s, pos);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0)) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(cp));
    } else {
      utf8::append_code_point(cp, out);
    }
  }
  out += quote;
  return out;
}

void append_json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  size_t pos = 0;
  while (pos < s.size()) {
    const char32_t cp = utf8::next_code_point(s, pos);
    switch (cp) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
          if (cp >= 0x10000) {
            const char32_t v = cp - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
          }
        } else {
          utf8::append_code_point(cp, out);
        }
    }
  }
  out += '"';
}

std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
  return format_float(f);
}

void append_json(const Value& v, bool ensure_ascii, int indent, int depth, std::string_view item_sep,
                 std::string_view key_sep, bool sort_keys, std::string& out) {
  const WalkLevel level;
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(d), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat:
      out += json_float(v.as_double());
      return;
    case Value::Kind::kString:
      append_json_string(v.as_string(), ensure_ascii, out);
      return;
    case Value::Kind::kList: {
      if (v.as_list().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      bool first = true;
      for (const Value& e : v.as_list()) {
        if (!first) out += item_sep;
        first = false;
        newline(depth + 1);
        append_json(e, ensure_ascii, indent, depth + 1, item_sep, key_sep, sort_keys, out);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.as_dict().empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.as_dict()) entries.push_back(&e);
      if (sort_keys) {
        std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      out += '{';
      bool first = true;
      for (const auto* e : entries) {
        if (!first) out += item_sep;
        first = false;
        newline(depth + 1);
        append_json_string(e->first, ensure_ascii, out);
        out += key_sep;
        append_json(e->second, ensure_ascii, indent, depth + 1, item_sep, key_sep, sort_keys, out);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      throw TemplateError(fmt::format("Object of type {} is not JSON serializable", v.type_name()));
  }
}

}  // namespace

std::string Value::str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return format_float(f_);
    case Kind::kString:
      return *s_;
    default:
      return repr();
  }
}

std::string Value::repr() const {
  const WalkLevel level;
  switch (kind_) {
    case Kind::kString:
      return python_string_repr(*s_);
    case Kind::kList: {
      std::string out = "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        out += (*list_)[i].repr();
      }
      return out + "]";
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : *dict_) {
        if (!first) out += ", ";
        first = false;
        out += python_string_repr(k) + ": " + v.repr();
      }
      return out + "}";
    }
    case Kind::kNamespace:
      return "<Namespace " + Value(*dict_).repr() + ">";
    case Kind::kFunction:
      return "<function " + fn_->first + ">";
    case Kind::kUndefined:
      return "Undefined";
    default:
      return str();
  }
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType object";
    case Kind::kBool:
      return "bool object";
    case Kind::kInt:
      return "int object";
    case Kind::kFloat:
      return "float object";
    case Kind::kString:
      return "str object";
    case Kind::kList:
      return "list object";
    case Kind::kDict:
      return "dict object";
    case Kind::kNamespace:
      return "Namespace object";
    case Kind::kFunction:
      return "function";
  }
  return "object";
}

std::string Value::to_json(bool ensure_ascii, int indent, std::string_view item_separator,
                           std::string_view key_separator, bool sort_keys) const {
  std::string out;
  append_json(*this, ensure_ascii, indent, 0, item_separator, key_separator, sort_keys, out);
  return out;
}

bool equal(const Value& a, const Value& b) {
  const WalkLevel level;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!equal(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.as_dict().size() != b.as_dict().size()) return false;
      for (const auto& [k, v] : a.as_dict()) {
        const Value* other = b.find(k);
        if (!other || !equal(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.as_dict() == &b.as_dict();
    default:
      return false;
  }
}

bool less(const Value& a, const Value& b) {
  const WalkLevel level;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 order = code point order
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equal(x[i], y[i])) return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw TemplateError(
      fmt::format("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name()));
}

}  // namespace omni::text::jinja
