#include "text/chat_template/template_builtins.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>

#include "base/error.h"
#include "text/tokenizer/utf8.h"

namespace omni::text::jinja {
namespace {

std::u32string to_u32(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) out.push_back(utf8::next_code_point(s, pos));
  return out;
}

std::string from_u32(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) utf8::append_code_point(cp, out);
  return out;
}

bool is_space(char32_t cp) { return utf8::is_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F); }

// Python's str.strip/lstrip/rstrip.
std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  const std::u32string u = to_u32(s);
  std::u32string set;
  const bool whitespace = !chars || chars->is_none() || chars->is_undefined();
  if (!whitespace) set = to_u32(chars->str());
  auto strippable = [&](char32_t c) { return whitespace ? is_space(c) : set.find(c) != std::u32string::npos; };
  size_t begin = 0, end = u.size();
  if (left) {
    while (begin < end && strippable(u[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strippable(u[end - 1])) --end;
  }
  return from_u32(std::u32string_view(u).substr(begin, end - begin));
}

const Value* arg(CallArgs& args, size_t index, std::string_view keyword) {
  for (auto& [k, v] : args.keyword) {
    if (k == keyword) return &v;
  }
  return index < args.positional.size() ? &args.positional[index] : nullptr;
}

const std::string& need_string(const Value& v, std::string_view what) {
  if (!v.is_string()) throw TemplateError(fmt::format("{} expects a string, got {}", what, v.type_name()));
  return v.as_string();
}

int64_t need_int(const Value* v, int64_t fallback, std::string_view what) {
  if (!v || v->is_none()) return fallback;
  if (v->is_int() || v->is_bool()) return v->as_int();
  throw TemplateError(fmt::format("{} expects an integer, got {}", what, v->type_name()));
}

List python_split(const std::string& s, const Value* sep, int64_t maxsplit) {
  List out;
  if (!sep || sep->is_none()) {
    const std::u32string u = to_u32(s);
    size_t i = 0;
    while (i < u.size()) {
      while (i < u.size() && is_space(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t end = u.size();
        while (end > i && is_space(u[end - 1])) --end;
        out.emplace_back(from_u32(std::u32string_view(u).substr(i, end - i)));
        return out;
      }
      size_t j = i;
      while (j < u.size() && !is_space(u[j])) ++j;
      out.emplace_back(from_u32(std::u32string_view(u).substr(i, j - i)));
      i = j;
    }
    return out;
  }
  const std::string& separator = need_string(*sep, "split()");
  if (separator.empty()) throw TemplateError("empty separator");
  size_t start = 0;
  while (true) {
    const size_t at =
        (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) ? std::string::npos : s.find(separator, start);
    if (at == std::string::npos) {
      out.emplace_back(s.substr(start));
      return out;
    }
    out.emplace_back(s.substr(start, at - start));
    start = at + separator.size();
  }
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between characters (and at both ends).
    const std::u32string u = to_u32(s);
    int64_t done = 0;
    for (char32_t c : u) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      utf8::append_code_point(c, out);
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(from, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += to;
    start = at + from.size();
    ++done;
  }
  out.append(s, start);
  return out;
}

std::string title_case(const std::string& s) {
  // Python's str.title() on the ASCII letters chat templates use; other letters pass through.
  std::string out = s;
  bool previous_cased = false;
  for (char& c : out) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c));
    if (alpha) c = static_cast<char>(previous_cased ? std::tolower(c) : std::toupper(c));
    previous_cased = alpha;
  }
  return out;
}

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s)
    c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c))
                                : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool starts_or_ends(const std::string& s, const Value& affix, bool start) {
  auto check = [&](const Value& a) {
    const std::string& x = need_string(a, start ? "startswith()" : "endswith()");
    if (x.size() > s.size()) return false;
    return start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list()) {
    return std::any_of(affix.as_list().begin(), affix.as_list().end(), check);
  }
  return check(affix);
}

Value bound(std::string name, Function f) { return Value::function(std::move(name), std::move(f)); }

Value string_method(const Value& self, const std::string& name) {
  const std::string& s = self.as_string();
  if (name == "startswith" || name == "endswith") {
    const bool start = name == "startswith";
    return bound(name, [s, start](CallArgs& a) {
      if (a.positional.empty()) throw TemplateError("startswith()/endswith() needs an argument");
      return Value(starts_or_ends(s, a.positional[0], start));
    });
  }
  if (name == "split" || name == "rsplit") {
    return bound(name, [s](CallArgs& a) {
      return Value(python_split(s, arg(a, 0, "sep"), need_int(arg(a, 1, "maxsplit"), -1, "split()")));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return bound(name, [s, left, right](CallArgs& a) { return Value(strip(s, arg(a, 0, "chars"), left, right)); });
  }
  if (name == "replace") {
    return bound(name, [s](CallArgs& a) {
      if (a.positional.size() < 2) throw TemplateError("replace() needs two arguments");
      return Value(replace_all(s, need_string(a.positional[0], "replace()"), need_string(a.positional[1], "replace()"),
                               need_int(arg(a, 2, "count"), -1, "replace()")));
    });
  }
  if (name == "upper" || name == "lower") {
    const bool upper = name == "upper";
    return bound(name, [s, upper](CallArgs&) { return Value(ascii_case(s, upper)); });
  }
  if (name == "title") return bound(name, [s](CallArgs&) { return Value(title_case(s)); });
  if (name == "capitalize") {
    return bound(name, [s](CallArgs&) {
      std::string out = ascii_case(s, false);
      if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
      return Value(out);
    });
  }
  if (name == "find" || name == "count") {
    const bool find = name == "find";
    return bound(name, [s, find](CallArgs& a) {
      if (a.positional.empty()) throw TemplateError("find()/count() needs an argument");
      const std::string& x = need_string(a.positional[0], "find()");
      if (find) {
        const size_t at = s.find(x);
        return Value(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(to_u32(s.substr(0, at)).size()));
      }
      if (x.empty()) return Value(static_cast<int64_t>(to_u32(s).size() + 1));
      int64_t n = 0;
      for (size_t at = s.find(x); at != std::string::npos; at = s.find(x, at + x.size())) ++n;
      return Value(n);
    });
  }
  if (name == "join") {
    return bound(name, [s](CallArgs& a) {
      if (a.positional.empty()) throw TemplateError("join() needs an argument");
      std::string out;
      bool first = true;
      for (const Value& v : iterate(a.positional[0])) {
        if (!first) out += s;
        first = false;
        out += need_string(v, "join()");
      }
      return Value(out);
    });
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum") {
    return bound(name, [s, name](CallArgs&) {
      if (s.empty()) return Value(false);
      for (char32_t c : to_u32(s)) {
        bool ok = false;
        if (name == "isspace") ok = is_space(c);
        if (name == "isdigit") ok = c >= '0' && c <= '9';
        if (name == "isalpha") ok = c < 0x80 ? std::isalpha(static_cast<int>(c)) : utf8::is_word_char(c);
        if (name == "isalnum") ok = c < 0x80 ? std::isalnum(static_cast<int>(c)) : utf8::is_word_char(c);
        if (!ok) return Value(false);
      }
      return Value(true);
    });
  }
  if (name == "splitlines") {
    return bound(name, [s](CallArgs&) {
      List out;
      size_t start = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\n' || s[i] == '\r') {
          out.emplace_back(s.substr(start, i - start));
          if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
          start = i + 1;
        }
      }
      if (start < s.size()) out.emplace_back(s.substr(start));
      return Value(out);
    });
  }
  return Value::undefined(fmt::format("'str object' has no attribute '{}'", name));
}

Value dict_method(const Value& self, const std::string& name) {
  if (name == "items") {
    return bound(name, [self](CallArgs&) {
      List out;
      for (const auto& [k, v] : self.as_dict()) out.emplace_back(List{Value(k), v});
      return Value(out);
    });
  }
  if (name == "keys" || name == "values") {
    const bool keys = name == "keys";
    return bound(name, [self, keys](CallArgs&) {
      List out;
      for (const auto& [k, v] : self.as_dict()) out.push_back(keys ? Value(k) : v);
      return Value(out);
    });
  }
  if (name == "get") {
    return bound(name, [self](CallArgs& a) {
      if (a.positional.empty()) throw TemplateError("get() needs a key");
      if (a.positional[0].is_string()) {
        if (const Value* v = self.find(a.positional[0].as_string())) return *v;
      }
      return a.positional.size() > 1 ? a.positional[1] : Value::none();
    });
  }
  return Value();
}

Value list_method(const Value& self, const std::string& name) {
  if (name == "index" || name == "count") {
    const bool index = name == "index";
    return bound(name, [self, index](CallArgs& a) {
      if (a.positional.empty()) throw TemplateError("index()/count() needs an argument");
      int64_t n = 0;
      for (size_t i = 0; i < self.as_list().size(); ++i) {
        if (equal(self.as_list()[i], a.positional[0])) {
          if (index) return Value(static_cast<int64_t>(i));
          ++n;
        }
      }
      if (index) throw TemplateError(fmt::format("{} is not in list", a.positional[0].repr()));
      return Value(n);
    });
  }
  return Value::undefined(fmt::format("'list object' has no attribute '{}'", name));
}

int64_t length(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(to_u32(v.as_string()).size());
  if (v.is_list()) return static_cast<int64_t>(v.as_list().size());
  if (v.is_dict() || v.is_namespace()) return static_cast<int64_t>(v.as_dict().size());
  if (v.is_undefined()) return 0;
  throw TemplateError(fmt::format("object of type '{}' has no len()", v.type_name()));
}

// The attribute path "a.b.0" of an item (selectattr, map, sort, groupby).
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    int64_t index = 0;
    if (numeric && std::from_chars(part.data(), part.data() + part.size(), index).ec != std::errc()) {
      throw TemplateError(fmt::format("attribute index {} does not fit in 64 bits", part));
    }
    v = numeric ? get_item(v, Value(index)) : get_item(v, Value(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return v;
}

// select/reject/selectattr/rejectattr: arguments after the test name go to the test.
List select(const Value& value, CallArgs& args, bool by_attribute, bool keep) {
  size_t i = 0;
  std::string attribute;
  if (by_attribute) {
    if (args.positional.empty()) throw TemplateError("selectattr/rejectattr need an attribute");
    attribute = need_string(args.positional[i++], "selectattr()");
  }
  std::string test;
  CallArgs test_args;
  if (i < args.positional.size()) {
    test = need_string(args.positional[i++], "select()");
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(i), args.positional.end());
  }
  List out;
  for (const Value& item : iterate(value)) {
    const Value subject = by_attribute ? attribute_path(item, attribute) : item;
    const bool passed = test.empty() ? subject.truthy() : apply_test(test, subject, test_args);
    if (passed == keep) out.push_back(item);
  }
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

struct FilterEntry {
  const char* name;
  Value (*apply)(const Value&, CallArgs&);
};

Value filter_tojson(const Value& v, CallArgs& a) {
  // transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
  const Value* ensure_ascii = arg(a, 0, "ensure_ascii");
  const Value* indent = arg(a, 1, "indent");
  const Value* separators = arg(a, 2, "separators");
  const Value* sort_keys = arg(a, 3, "sort_keys");
  int indent_n = -1;
  if (indent && !indent->is_none()) indent_n = static_cast<int>(need_int(indent, 0, "tojson indent"));
  std::string item_sep = indent_n >= 0 ? "," : ", ", key_sep = ": ";
  if (separators && !separators->is_none()) {
    if (!separators->is_list() || separators->as_list().size() != 2)
      throw TemplateError("tojson separators must be a pair");
    item_sep = need_string(separators->as_list()[0], "tojson separators");
    key_sep = need_string(separators->as_list()[1], "tojson separators");
  }
  return Value(
      v.to_json(ensure_ascii && ensure_ascii->truthy(), indent_n, item_sep, key_sep, sort_keys && sort_keys->truthy()));
}

Value filter_default(const Value& v, CallArgs& a) {
  const Value* fallback = arg(a, 0, "default_value");
  const Value* boolean = arg(a, 1, "boolean");
  const bool use_fallback = (boolean && boolean->truthy()) ? !v.truthy() : v.is_undefined();
  if (use_fallback) return fallback ? *fallback : Value("");
  return v;
}

Value filter_join(const Value& v, CallArgs& a) {
  const Value* sep = arg(a, 0, "d");
  const Value* attribute = arg(a, 1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first && sep) out += sep->str();
    first = false;
    out += (attribute ? attribute_path(item, attribute->str()) : item).str();
  }
  return Value(out);
}

Value filter_map(const Value& v, CallArgs& a) {
  List out;
  if (const Value* attribute = arg(a, 99, "attribute")) {
    const Value* fallback = arg(a, 99, "default");
    for (const Value& item : iterate(v)) {
      Value x = attribute_path(item, attribute->str());
      out.push_back(x.is_undefined() && fallback ? *fallback : x);
    }
    return Value(out);
  }
  if (a.positional.empty()) throw TemplateError("map() needs a filter name or attribute=");
  const std::string filter = need_string(a.positional[0], "map()");
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  for (const Value& item : iterate(v)) {
    CallArgs copy = rest;
    out.push_back(apply_filter(filter, item, copy));
  }
  return Value(out);
}

Value filter_sort(const Value& v, CallArgs& a) {
  List items = iterate(v);
  const Value* reverse = arg(a, 0, "reverse");
  const Value* case_sensitive = arg(a, 1, "case_sensitive");
  const Value* attribute = arg(a, 2, "attribute");
  auto key = [&](const Value& item) {
    Value k = attribute ? attribute_path(item, attribute->str()) : item;
    if (k.is_string() && !(case_sensitive && case_sensitive->truthy())) return Value(ascii_case(k.as_string(), false));
    return k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) { return less(key(x), key(y)); });
  if (reverse && reverse->truthy()) std::reverse(items.begin(), items.end());
  return Value(items);
}

Value filter_min_max(const Value& v, bool max) {
  const List items = iterate(v);
  if (items.empty()) return Value::undefined("no items");
  Value best = items[0];
  for (const Value& x : items) {
    if (max ? less(best, x) : less(x, best)) best = x;
  }
  return best;
}

Value filter_round(const Value& v, CallArgs& a) {
  const int64_t precision = need_int(arg(a, 0, "precision"), 0, "round()");
  const std::string method = arg(a, 1, "method") ? arg(a, 1, "method")->str() : "common";
  const double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * scale;
  x = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
  return Value(x / scale);
}

Value filter_indent(const Value& v, CallArgs& a) {
  const Value* width = arg(a, 0, "width");
  const std::string pad =
      width && width->is_string() ? width->as_string() : std::string(need_int(width, 4, "indent()"), ' ');
  const bool first = arg(a, 1, "first") && arg(a, 1, "first")->truthy();
  const bool blank = arg(a, 2, "blank") && arg(a, 2, "blank")->truthy();
  const std::string s = v.str();
  std::string out;
  size_t start = 0;
  bool is_first = true;
  while (start <= s.size()) {
    const size_t nl = s.find('\n', start);
    const std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if ((is_first && first) || (!is_first && (blank || !line.empty()))) out += pad;
    out += line;
    if (nl == std::string::npos) break;
    out += '\n';
    start = nl + 1;
    is_first = false;
  }
  return Value(out);
}

const FilterEntry kFilters[] = {
    {"tojson", filter_tojson},
    {"trim", [](const Value& v, CallArgs& a) { return Value(strip(v.str(), arg(a, 0, "chars"), true, true)); }},
    {"length", [](const Value& v, CallArgs&) { return Value(length(v)); }},
    {"count", [](const Value& v, CallArgs&) { return Value(length(v)); }},
    {"string", [](const Value& v, CallArgs&) { return Value(v.str()); }},
    {"lower", [](const Value& v, CallArgs&) { return Value(ascii_case(v.str(), false)); }},
    {"upper", [](const Value& v, CallArgs&) { return Value(ascii_case(v.str(), true)); }},
    {"title", [](const Value& v, CallArgs&) { return Value(title_case(v.str())); }},
    {"capitalize",
     [](const Value& v, CallArgs&) {
       std::string out = ascii_case(v.str(), false);
       if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
       return Value(out);
     }},
    {"default", filter_default},
    {"d", filter_default},
    {"join", filter_join},
    {"items",
     [](const Value& v, CallArgs&) {
       if (v.is_undefined()) return Value(List{});
       if (!v.is_dict()) throw TemplateError(fmt::format("items filter expects a mapping, got {}", v.type_name()));
       List out;
       for (const auto& [k, x] : v.as_dict()) out.emplace_back(List{Value(k), x});
       return Value(out);
     }},
    {"dictsort",
     [](const Value& v, CallArgs&) {
       if (!v.is_dict()) throw TemplateError("dictsort expects a mapping");
       List out;
       for (const auto& [k, x] : v.as_dict()) out.emplace_back(List{Value(k), x});
       std::stable_sort(out.begin(), out.end(), [](const Value& x, const Value& y) {
         return ascii_case(x.as_list()[0].as_string(), false) < ascii_case(y.as_list()[0].as_string(), false);
       });
       return Value(out);
     }},
    {"list", [](const Value& v, CallArgs&) { return Value(iterate(v)); }},
    {"first",
     [](const Value& v, CallArgs&) {
       const List items = iterate(v);
       return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
     }},
    {"last",
     [](const Value& v, CallArgs&) {
       const List items = iterate(v);
       return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
     }},
    {"reverse",
     [](const Value& v, CallArgs&) {
       if (v.is_string()) {
         std::u32string u = to_u32(v.as_string());
         std::reverse(u.begin(), u.end());
         return Value(from_u32(u));
       }
       List items = iterate(v);
       std::reverse(items.begin(), items.end());
       return Value(items);
     }},
    {"select", [](const Value& v, CallArgs& a) { return Value(select(v, a, false, true)); }},
    {"reject", [](const Value& v, CallArgs& a) { return Value(select(v, a, false, false)); }},
    {"selectattr", [](const Value& v, CallArgs& a) { return Value(select(v, a, true, true)); }},
    {"rejectattr", [](const Value& v, CallArgs& a) { return Value(select(v, a, true, false)); }},
    {"map", filter_map},
    {"sort", filter_sort},
    {"unique",
     [](const Value& v, CallArgs&) {
       List out;
       for (const Value& x : iterate(v)) {
         if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equal(x, y); })) out.push_back(x);
       }
       return Value(out);
     }},
    {"min", [](const Value& v, CallArgs&) { return filter_min_max(v, false); }},
    {"max", [](const Value& v, CallArgs&) { return filter_min_max(v, true); }},
    {"sum",
     [](const Value& v, CallArgs&) {
       bool is_float = false;
       int64_t i = 0;
       double f = 0;
       for (const Value& x : iterate(v)) {
         if (!x.is_number()) throw TemplateError("sum() of non-numbers");
         is_float = is_float || x.is_float();
         i += x.is_float() ? 0 : x.as_int();
         f += x.as_double();
       }
       return is_float ? Value(f) : Value(i);
     }},
    {"abs",
     [](const Value& v, CallArgs&) {
       if (v.is_float()) return Value(std::fabs(v.as_double()));
       if (v.is_number()) {
         if (v.as_int() == INT64_MIN) throw TemplateError("abs() of the smallest integer overflows");
         return Value(static_cast<int64_t>(std::llabs(v.as_int())));
       }
       throw TemplateError("abs() of a non-number");
     }},
    {"int",
     [](const Value& v, CallArgs& a) {
       if (v.is_int() || v.is_bool()) return Value(v.as_int());
       if (v.is_number()) {
         const double d = v.as_double();
         // Python's int() of a float that no 64-bit integer holds (inf, nan, 1e300).
         if (!(d > -9.2233720368547758e18 && d < 9.2233720368547758e18)) {
           throw TemplateError(fmt::format("int() of {} does not fit in 64 bits", d));
         }
         return Value(static_cast<int64_t>(d));
       }
       try {
         return Value(static_cast<int64_t>(std::stoll(strip(v.str(), nullptr, true, true))));
       } catch (const std::exception&) {
         return arg(a, 0, "default") ? *arg(a, 0, "default") : Value(int64_t{0});
       }
     }},
    {"float",
     [](const Value& v, CallArgs& a) {
       if (v.is_number()) return Value(v.as_double());
       try {
         return Value(std::stod(strip(v.str(), nullptr, true, true)));
       } catch (const std::exception&) {
         return arg(a, 0, "default") ? *arg(a, 0, "default") : Value(0.0);
       }
     }},
    {"round", filter_round},
    {"replace",
     [](const Value& v, CallArgs& a) {
       if (a.positional.size() < 2) throw TemplateError("replace needs two arguments");
       return Value(replace_all(v.str(), a.positional[0].str(), a.positional[1].str(),
                                need_int(arg(a, 2, "count"), -1, "replace")));
     }},
    {"safe", [](const Value& v, CallArgs&) { return v; }},
    {"escape", [](const Value& v, CallArgs&) { return Value(html_escape(v.str())); }},
    {"e", [](const Value& v, CallArgs&) { return Value(html_escape(v.str())); }},
    {"indent", filter_indent},
    {"wordcount",
     [](const Value& v, CallArgs&) { return Value(static_cast<int64_t>(python_split(v.str(), nullptr, -1).size())); }},
    {"attr", [](const Value& v,
                CallArgs& a) { return a.positional.empty() ? Value() : get_attribute(v, a.positional[0].str()); }},
};

struct TestEntry {
  const char* name;
  bool (*apply)(const Value&, CallArgs&);
};

const Value& test_arg(CallArgs& a, std::string_view test) {
  if (a.positional.empty()) throw TemplateError(fmt::format("test '{}' needs an argument", test));
  return a.positional[0];
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) return container.as_string().find(need_string(item, "'in'")) != std::string::npos;
  if (container.is_list()) {
    return std::any_of(container.as_list().begin(), container.as_list().end(),
                       [&](const Value& x) { return equal(x, item); });
  }
  if (container.is_dict()) return item.is_string() && container.find(item.as_string()) != nullptr;
  if (container.is_undefined()) return false;
  throw TemplateError(fmt::format("argument of type '{}' is not iterable", container.type_name()));
}

const TestEntry kTests[] = {
    {"defined", [](const Value& v, CallArgs&) { return !v.is_undefined(); }},
    {"undefined", [](const Value& v, CallArgs&) { return v.is_undefined(); }},
    {"none", [](const Value& v, CallArgs&) { return v.is_none(); }},
    {"string", [](const Value& v, CallArgs&) { return v.is_string(); }},
    {"number", [](const Value& v, CallArgs&) { return v.is_int() || v.is_float(); }},
    {"integer", [](const Value& v, CallArgs&) { return v.is_int(); }},
    {"float", [](const Value& v, CallArgs&) { return v.is_float(); }},
    {"boolean", [](const Value& v, CallArgs&) { return v.is_bool(); }},
    {"true", [](const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }},
    {"false", [](const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }},
    {"mapping", [](const Value& v, CallArgs&) { return v.is_dict(); }},
    {"sequence", [](const Value& v, CallArgs&) { return v.is_list() || v.is_string() || v.is_dict(); }},
    {"iterable",
     [](const Value& v, CallArgs&) { return v.is_list() || v.is_string() || v.is_dict() || v.is_undefined(); }},
    {"callable", [](const Value& v, CallArgs&) { return v.is_function(); }},
    {"odd", [](const Value& v, CallArgs&) { return v.is_number() && v.as_int() % 2 != 0; }},
    {"even", [](const Value& v, CallArgs&) { return v.is_number() && v.as_int() % 2 == 0; }},
    {"divisibleby", [](const Value& v, CallArgs& a) { return v.as_int() % test_arg(a, "divisibleby").as_int() == 0; }},
    {"eq", [](const Value& v, CallArgs& a) { return equal(v, test_arg(a, "eq")); }},
    {"equalto", [](const Value& v, CallArgs& a) { return equal(v, test_arg(a, "equalto")); }},
    {"==", [](const Value& v, CallArgs& a) { return equal(v, test_arg(a, "==")); }},
    {"ne", [](const Value& v, CallArgs& a) { return !equal(v, test_arg(a, "ne")); }},
    {"!=", [](const Value& v, CallArgs& a) { return !equal(v, test_arg(a, "!=")); }},
    {"lt", [](const Value& v, CallArgs& a) { return less(v, test_arg(a, "lt")); }},
    {"lessthan", [](const Value& v, CallArgs& a) { return less(v, test_arg(a, "lessthan")); }},
    {"gt", [](const Value& v, CallArgs& a) { return less(test_arg(a, "gt"), v); }},
    {"greaterthan", [](const Value& v, CallArgs& a) { return less(test_arg(a, "greaterthan"), v); }},
    {"le", [](const Value& v, CallArgs& a) { return !less(test_arg(a, "le"), v); }},
    {"ge", [](const Value& v, CallArgs& a) { return !less(v, test_arg(a, "ge")); }},
    {"in", [](const Value& v, CallArgs& a) { return contains(test_arg(a, "in"), v); }},
    {"sameas",
     [](const Value& v, CallArgs& a) {
       const Value& o = test_arg(a, "sameas");
       return v.kind() == o.kind() && (v.is_none() || v.is_undefined() || (v.is_bool() && v.as_bool() == o.as_bool()));
     }},
    {"lower",
     [](const Value& v, CallArgs&) { return v.is_string() && ascii_case(v.as_string(), false) == v.as_string(); }},
    {"upper",
     [](const Value& v, CallArgs&) { return v.is_string() && ascii_case(v.as_string(), true) == v.as_string(); }},
};

}  // namespace

bool is_known_filter(std::string_view name) {
  return std::any_of(std::begin(kFilters), std::end(kFilters), [&](const FilterEntry& f) { return f.name == name; });
}

bool is_known_test(std::string_view name) {
  return std::any_of(std::begin(kTests), std::end(kTests), [&](const TestEntry& t) { return t.name == name; });
}

Value apply_filter(std::string_view name, const Value& value, CallArgs& args) {
  for (const FilterEntry& f : kFilters) {
    if (f.name == name) return f.apply(value, args);
  }
  throw TemplateError(fmt::format("no filter named '{}'", name));
}

bool apply_test(std::string_view name, const Value& value, CallArgs& args) {
  for (const TestEntry& t : kTests) {
    if (t.name == name) return t.apply(value, args);
  }
  throw TemplateError(fmt::format("no test named '{}'", name));
}

List iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kList:
      return value.as_list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, v] : value.as_dict()) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      const std::string& s = value.as_string();
      for (size_t pos = 0; pos < s.size();) {
        const size_t start = pos;
        utf8::next_code_point(s, pos);
        chars.emplace_back(s.substr(start, pos - start));
      }
      return chars;
    }
    case Value::Kind::kUndefined:
      return {};
    default:
      throw TemplateError(fmt::format("'{}' is not iterable", value.type_name()));
  }
}

Value get_attribute(const Value& object, const std::string& name) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      throw TemplateError(object.undefined_hint().empty() ? "'Undefined' has no attribute '" + name + "'"
                                                          : object.undefined_hint());
    case Value::Kind::kDict: {
      Value method = dict_method(object, name);
      if (method.is_function()) return method;
      if (const Value* v = object.find(name)) return *v;
      return Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
    }
    case Value::Kind::kNamespace:
      if (const Value* v = object.find(name)) return *v;
      return Value::undefined(fmt::format("'Namespace object' has no attribute '{}'", name));
    case Value::Kind::kString:
      return string_method(object, name);
    case Value::Kind::kList:
      return list_method(object, name);
    default:
      return Value::undefined(fmt::format("'{}' has no attribute '{}'", object.type_name(), name));
  }
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) {
    throw TemplateError(object.undefined_hint().empty() ? "'Undefined' has no item " + key.repr()
                                                        : object.undefined_hint());
  }
  if (object.is_dict() || object.is_namespace()) {
    if (key.is_string()) {
      if (const Value* v = object.find(key.as_string())) return *v;
      if (object.is_dict()) {
        Value method = dict_method(object, key.as_string());
        if (method.is_function()) return method;
      }
    }
    return Value::undefined(fmt::format("'{}' has no attribute {}", object.type_name(), key.repr()));
  }
  if ((object.is_list() || object.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (object.is_list()) {
      const auto n = static_cast<int64_t>(object.as_list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(fmt::format("list object has no element {}", key.as_int()));
      return object.as_list()[static_cast<size_t>(i)];
    }
    const std::u32string u = to_u32(object.as_string());
    const auto n = static_cast<int64_t>(u.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined(fmt::format("str object has no element {}", key.as_int()));
    return Value(from_u32(std::u32string_view(u).substr(static_cast<size_t>(i), 1)));
  }
  if (key.is_string()) return get_attribute(object, key.as_string());
  return Value::undefined(fmt::format("'{}' has no item {}", object.type_name(), key.repr()));
}

Value get_slice(const Value& object, const Value* start, const Value* stop, const Value* step) {
  auto opt = [](const Value* v) -> std::optional<int64_t> {
    if (!v || v->is_none()) return std::nullopt;
    if (!v->is_int() && !v->is_bool()) throw TemplateError("slice indices must be integers or None");
    return v->as_int();
  };
  const int64_t st = opt(step).value_or(1);
  if (st == 0) throw TemplateError("slice step cannot be zero");
  auto pick = [&](int64_t n, auto&& take) {
    // Python's slice.indices().
    auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
      if (!v) return fallback;
      int64_t x = *v;
      if (x < 0) x += n;
      if (st > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t b = clamp(opt(start), st > 0 ? 0 : n - 1);
    const int64_t e = clamp(opt(stop), st > 0 ? n : -1);
    for (int64_t i = b; st > 0 ? i < e : i > e; i += st) take(static_cast<size_t>(i));
  };
  if (object.is_list()) {
    List out;
    pick(static_cast<int64_t>(object.as_list().size()), [&](size_t i) { out.push_back(object.as_list()[i]); });
    return Value(out);
  }
  if (object.is_string()) {
    const std::u32string u = to_u32(object.as_string());
    std::u32string out;
    pick(static_cast<int64_t>(u.size()), [&](size_t i) { out.push_back(u[i]); });
    return Value(from_u32(out));
  }
  throw TemplateError(fmt::format("'{}' cannot be sliced", object.type_name()));
}

Dict global_functions() {
  Dict globals;
  globals.emplace_back("range", Value::function("range", [](CallArgs& a) {
                         int64_t start = 0, stop = 0, step = 1;
                         if (a.positional.size() == 1) {
                           stop = a.positional[0].as_int();
                         } else if (a.positional.size() >= 2) {
                           start = a.positional[0].as_int();
                           stop = a.positional[1].as_int();
                           if (a.positional.size() > 2) step = a.positional[2].as_int();
                         }
                         if (step == 0) throw TemplateError("range() arg 3 must not be zero");
                         List out;
                         for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
                           out.emplace_back(i);
                           if (out.size() > 1000000) throw TemplateError("range() too large");
                           if (__builtin_add_overflow(i, step, &i)) break;  // past INT64_MAX: the range ends
                         }
                         return Value(out);
                       }));
  globals.emplace_back("namespace", Value::function("namespace", [](CallArgs& a) {
                         Dict attributes;
                         for (const Value& p : a.positional) {
                           if (p.is_dict()) attributes.insert(attributes.end(), p.as_dict().begin(), p.as_dict().end());
                         }
                         for (auto& [k, v] : a.keyword) attributes.emplace_back(k, v);
                         return Value::make_namespace(std::move(attributes));
                       }));
  globals.emplace_back("dict", Value::function("dict", [](CallArgs& a) {
                         Dict d;
                         for (auto& [k, v] : a.keyword) d.emplace_back(k, v);
                         return Value(std::move(d));
                       }));
  globals.emplace_back("raise_exception", Value::function("raise_exception", [](CallArgs& a) -> Value {
                         throw Error(ErrorCode::kInvalidArgument,
                                     a.positional.empty() ? std::string("raise_exception") : a.positional[0].str());
                       }));
  globals.emplace_back("strftime_now", Value::function("strftime_now", [](CallArgs& a) {
                         const std::string format = a.positional.empty() ? "" : a.positional[0].str();
                         const std::time_t now = std::time(nullptr);
                         std::tm local{};
                         localtime_r(&now, &local);
                         char buf[256];
                         const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &local);
                         return Value(std::string(buf, n));
                       }));
  return globals;
}

}  // namespace omni::text::jinja
