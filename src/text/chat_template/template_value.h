// The values a chat template computes with: Python's None/bool/int/float/str/list/dict as
// Jinja sees them, plus Jinja's Undefined, namespace() objects and callables. Lists and dicts
// are shared and never modified (the sandbox transformers renders in is immutable); only a
// namespace's attributes change. Formatting follows Python (str(), repr(), json.dumps) so that
// output matches jinja2 byte for byte.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/json.h"

namespace omni::text::jinja {

// A failure while evaluating a template expression (a type error, an undefined value used).
// The renderer turns it into omni::Error(kInvalidArgument) naming the template line.
class TemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How deep lists and dicts may nest. A template that builds [[[...]]] in a loop gets a
// TemplateError instead of a value that printing, comparing or freeing would recurse through
// without bound; printing, comparing and JSON walks stop at the same depth (a namespace that
// holds itself, which the renderer's namespaces can, ends there too).
inline constexpr int kMaxValueNesting = 512;

class Value;
using List = std::vector<Value>;
// Insertion-ordered, as a Python dict is.
using Dict = std::vector<std::pair<std::string, Value>>;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using Function = std::function<Value(CallArgs&)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

  Value() = default;  // Undefined
  static Value undefined(std::string hint = {});
  static Value none();
  Value(bool b);  // NOLINT(google-explicit-constructor): values mix freely, as in Python
  Value(int64_t i);
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double f);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  // Throw TemplateError when the new value would nest deeper than kMaxValueNesting.
  Value(List list);
  Value(Dict dict);
  static Value make_namespace(Dict attributes);
  static Value function(std::string name, Function f);
  // Throws omni::Error(kInvalidArgument) for JSON nested deeper than kMaxValueNesting.
  static Value from_json(const OrderedJson& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_double() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  const std::string& as_string() const { return *s_; }
  const List& as_list() const { return *list_; }
  const Dict& as_dict() const { return *dict_; }  // also a namespace's attributes
  Dict& namespace_attributes() const { return *dict_; }
  const Function& as_function() const { return fn_->second; }
  const std::string& function_name() const { return fn_->first; }
  // Why a value is undefined ("'dict object' has no attribute 'x'"), for error messages.
  std::string undefined_hint() const { return s_ ? *s_ : std::string(); }

  // A dict entry or namespace attribute, or nullptr.
  const Value* find(std::string_view key) const;

  // Python truthiness.
  bool truthy() const;
  // Python's str() (what {{ value }} prints); Undefined prints as "".
  std::string str() const;
  // Python's repr().
  std::string repr() const;
  // Python's type name, for messages ("dict object", "str object").
  std::string type_name() const;
  // json.dumps(value, ensure_ascii, indent, separators, sort_keys); throws TemplateError for
  // Undefined and callables. `indent` < 0 means None.
  std::string to_json(bool ensure_ascii, int indent, std::string_view item_separator, std::string_view key_separator,
                      bool sort_keys) const;

 private:
  static Value from_json(const OrderedJson& j, int depth);

  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int nesting_ = 0;  // lists, dicts and namespaces: 1 + their deepest element's, when made
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const std::pair<std::string, Function>> fn_;
};

// Python ==.
bool equal(const Value& a, const Value& b);
// Python <; throws TemplateError for values that do not order.
bool less(const Value& a, const Value& b);
// Python's float repr (1.0, 1e-05, 1e+16, inf, nan).
std::string format_float(double f);

}  // namespace omni::text::jinja
