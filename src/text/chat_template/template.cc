#include "text/chat_template/template.h"

#include <cmath>
#include <cstdint>
#include <unordered_map>

#include "base/error.h"
#include "text/chat_template/template_builtins.h"
#include "text/chat_template/template_parser.h"

namespace omni::text::jinja {
namespace {

using Frame = std::unordered_map<std::string, Value>;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const std::string& name, const Dict& variables) : name_(name) {
    for (auto& [k, v] : global_functions()) globals_[k] = v;
    // Every namespace made in this rendering is kept until its end, when the renderer empties
    // them all: one that came to hold itself is freed too, and freeing a value never recurses
    // through a namespace.
    const Value make_namespace = globals_["namespace"];
    globals_["namespace"] = Value::function("namespace", [this, make_namespace](CallArgs& a) {
      namespaces_.push_back(make_namespace.as_function()(a));
      return namespaces_.back();
    });
    for (const auto& [k, v] : variables) globals_[k] = v;
    frames_.emplace_back();
  }
  ~Renderer() {
    frames_.clear();
    globals_.clear();
    for (const Value& ns : namespaces_) Dict().swap(ns.namespace_attributes());
  }
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  std::string render(const Body& body) {
    std::string out;
    try {
      render_body(body, out);
    } catch (const TemplateError& e) {
      throw_error(ErrorCode::kInvalidArgument, "{} line {}: {}", name_, line_, e.what());
    }
    return out;
  }

 private:
  Flow render_body(const Body& body, std::string& out) {
    for (const NodePtr& node : body) {
      const Flow flow = render_node(*node, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  // One level of evaluation: a node, an expression, and through them a macro call. The depth is
  // bounded by kMaxEvalDepth, the levels entered in one render by kMaxRenderSteps.
  class Level {
   public:
    explicit Level(Renderer& renderer) : renderer_(renderer) {
      if (++renderer_.steps_ > kMaxRenderSteps) {
        throw TemplateError(
            fmt::format("rendering takes more than {} steps (a huge or endless loop?)", kMaxRenderSteps));
      }
      if (renderer_.depth_ >= kMaxEvalDepth) {
        throw TemplateError(fmt::format("evaluation nested deeper than {} levels (a recursive macro?)", kMaxEvalDepth));
      }
      ++renderer_.depth_;
    }
    ~Level() { --renderer_.depth_; }
    Level(const Level&) = delete;
    Level& operator=(const Level&) = delete;

   private:
    Renderer& renderer_;
  };

  static void check_string_size(size_t bytes) {
    if (bytes > kMaxStringBytes) {
      throw TemplateError(fmt::format("a string of {} bytes is over the limit of {} bytes", bytes, kMaxStringBytes));
    }
  }

  Flow render_node(const Node& node, std::string& out) {
    Level level(*this);
    line_ = node.line;
    switch (node.kind) {
      case Node::Kind::kText:
        out += node.text;
        check_string_size(out.size());
        return Flow::kNormal;
      case Node::Kind::kOutput:
        out += eval(*node.expr).str();
        check_string_size(out.size());
        return Flow::kNormal;
      case Node::Kind::kIf:
        for (const auto& [condition, body] : node.branches) {
          if (eval(*condition).truthy()) return render_body(body, out);
        }
        return render_body(node.else_body, out);
      case Node::Kind::kFor:
        return render_for(node, out);
      case Node::Kind::kSet:
        render_set(node);
        return Flow::kNormal;
      case Node::Kind::kMacro:
        define_macro(node);
        return Flow::kNormal;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kCallBlock:
        return render_body(node.body, out);
    }
    return Flow::kNormal;
  }

  void assign(const std::vector<std::string>& targets, const Value& value, Frame& frame) {
    if (targets.size() == 1) {
      frame[targets[0]] = value;
      return;
    }
    const List items = iterate(value);
    if (items.size() != targets.size()) {
      throw TemplateError(fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
    }
    for (size_t i = 0; i < targets.size(); ++i) frame[targets[i]] = items[i];
  }

  Flow render_for(const Node& node, std::string& out) {
    List items = iterate(eval(*node.expr));
    if (node.condition) {
      // The loop's own filter runs first, so loop.length counts only the kept items.
      List kept;
      for (const Value& item : items) {
        frames_.emplace_back();
        assign(node.targets, item, frames_.back());
        const bool keep = eval(*node.condition).truthy();
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return render_body(node.else_body, out);
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      if (++loop_iterations_ > kMaxLoopIterations) {
        throw TemplateError(fmt::format("loops run more than {} iterations in one rendering (a huge or nested loop?)",
                                        kMaxLoopIterations));
      }
      frames_.emplace_back();
      Frame& frame = frames_.back();
      Dict loop{{"index", Value(i + 1)},
                {"index0", Value(i)},
                {"revindex", Value(n - i)},
                {"revindex0", Value(n - i - 1)},
                {"first", Value(i == 0)},
                {"last", Value(i == n - 1)},
                {"length", Value(n)},
                {"depth", Value(int64_t{1})},
                {"depth0", Value(int64_t{0})},
                {"previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item")},
                {"nextitem", i + 1 < n ? items[i + 1] : Value::undefined("there is no next item")}};
      loop.emplace_back("cycle", Value::function("cycle", [i](CallArgs& a) {
                          if (a.positional.empty()) throw TemplateError("no items for cycling given");
                          return a.positional[static_cast<size_t>(i) % a.positional.size()];
                        }));
      frame["loop"] = Value(std::move(loop));
      assign(node.targets, items[static_cast<size_t>(i)], frame);
      const Flow flow = render_body(node.body, out);
      frames_.pop_back();
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void render_set(const Node& node) {
    Value value;
    if (node.expr) {
      value = eval(*node.expr);
    } else {
      std::string captured;
      render_body(node.body, captured);
      value = Value(std::move(captured));
      for (const std::string& filter : node.filters) {
        CallArgs none;
        value = apply_filter(filter, value, none);
      }
    }
    if (!node.attribute.empty()) {
      const Value target = lookup(node.targets[0]);
      if (!target.is_namespace()) {
        throw TemplateError(fmt::format("cannot assign attribute on non-namespace object '{}'", node.targets[0]));
      }
      Dict& attributes = target.namespace_attributes();
      for (auto& [k, v] : attributes) {
        if (k == node.attribute) {
          v = value;
          return;
        }
      }
      attributes.emplace_back(node.attribute, value);
      return;
    }
    assign(node.targets, value, frames_.back());
  }

  void define_macro(const Node& node) {
    const Node* macro = &node;
    Renderer* self = this;
    frames_.back()[node.name] = Value::function(node.name, [macro, self](CallArgs& a) {
      Frame params;
      size_t positional = 0;
      for (const auto& [param, default_value] : macro->params) {
        const Value* given = nullptr;
        for (auto& [k, v] : a.keyword) {
          if (k == param) given = &v;
        }
        if (!given && positional < a.positional.size()) given = &a.positional[positional++];
        params[param] = given ? *given : default_value ? self->eval(*default_value) : Value::undefined();
      }
      if (positional < a.positional.size()) {
        throw TemplateError(
            fmt::format("macro '{}' takes not more than {} argument(s)", macro->name, macro->params.size()));
      }
      // The macro body sees the template's top-level names and its parameters, not the caller's.
      std::vector<Frame> saved;
      saved.swap(self->frames_);
      self->frames_.push_back(saved.front());
      self->frames_.push_back(std::move(params));
      std::string out;
      const int line = self->line_;
      try {
        self->render_body(macro->body, out);
      } catch (...) {
        self->frames_.swap(saved);
        throw;
      }
      self->frames_.swap(saved);
      self->line_ = line;
      return Value(std::move(out));
    });
  }

  Value lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      const auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    const auto g = globals_.find(name);
    if (g != globals_.end()) return g->second;
    return Value::undefined(fmt::format("'{}' is undefined", name));
  }

  CallArgs eval_args(const Expr& e) {
    CallArgs args;
    for (const ExprPtr& item : e.items) args.positional.push_back(eval(*item));
    for (const auto& [k, v] : e.keyword_args) args.keyword.emplace_back(k, eval(*v));
    return args;
  }

  static void need_defined(const Value& v) {
    if (v.is_undefined()) throw TemplateError(v.undefined_hint().empty() ? "value is undefined" : v.undefined_hint());
  }

  Value arithmetic(const std::string& op, const Value& a, const Value& b) {
    need_defined(a);
    need_defined(b);
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        check_string_size(a.as_string().size() + b.as_string().size());
        return Value(a.as_string() + b.as_string());
      }
      if (a.is_list() && b.is_list()) {
        check_list_size(a.as_list().size() + b.as_list().size());
        List out = a.as_list();
        out.insert(out.end(), b.as_list().begin(), b.as_list().end());
        return Value(out);
      }
    }
    if (op == "*" && ((a.is_string() && b.is_int()) || (a.is_int() && b.is_string()))) {
      const std::string& s = a.is_string() ? a.as_string() : b.as_string();
      const int64_t n = a.is_string() ? b.as_int() : a.as_int();
      if (n > 0 && s.size() > kMaxStringBytes / static_cast<uint64_t>(n)) {
        throw TemplateError(fmt::format("'*' would repeat a string of {} bytes {} times, over the limit of {} bytes",
                                        s.size(), n, kMaxStringBytes));
      }
      std::string out;
      for (int64_t i = 0; i < n; ++i) out += s;
      return Value(out);
    }
    if (!a.is_number() || !b.is_number()) {
      throw TemplateError(
          fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
    }
    const bool floats = a.is_float() || b.is_float();
    if (op == "/") {
      if (b.as_double() == 0) throw TemplateError("division by zero");
      return Value(a.as_double() / b.as_double());
    }
    if (op == "**") {
      if (!floats && b.as_int() >= 0) {
        const int64_t base = a.as_int();
        if (base == 0 || base == 1) return Value(b.as_int() == 0 ? int64_t{1} : base);
        if (base == -1) return Value(b.as_int() % 2 == 0 ? int64_t{1} : int64_t{-1});
        int64_t r = 1;  // |base| >= 2: at most 63 factors before an overflow
        for (int64_t i = 0; i < b.as_int(); ++i) {
          if (__builtin_mul_overflow(r, base, &r)) overflow(op);
        }
        return Value(r);
      }
      return Value(std::pow(a.as_double(), b.as_double()));
    }
    if (floats) {
      const double x = a.as_double(), y = b.as_double();
      if (op == "+") return Value(x + y);
      if (op == "-") return Value(x - y);
      if (op == "*") return Value(x * y);
      if (y == 0) throw TemplateError("float division by zero");
      if (op == "//") return Value(std::floor(x / y));
      if (op == "%") return Value(x - y * std::floor(x / y));
    } else {
      const int64_t x = a.as_int(), y = b.as_int();
      int64_t r = 0;
      if (op == "+") return __builtin_add_overflow(x, y, &r) ? overflow(op) : Value(r);
      if (op == "-") return __builtin_sub_overflow(x, y, &r) ? overflow(op) : Value(r);
      if (op == "*") return __builtin_mul_overflow(x, y, &r) ? overflow(op) : Value(r);
      if (y == 0) throw TemplateError("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) overflow(op);
      int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
      if (op == "//") return Value(q);
      if (op == "%") return Value(x - q * y);
    }
    throw TemplateError(fmt::format("unknown operator '{}'", op));
  }

  [[noreturn]] static Value overflow(const std::string& op) {
    throw TemplateError(fmt::format("integer overflow in '{}' (integers are 64-bit here)", op));
  }

  static void check_list_size(size_t items) {
    if (items > kMaxListItems) {
      throw TemplateError(fmt::format("a list of {} items is over the limit of {} items", items, kMaxListItems));
    }
  }

  // Every value an expression yields is checked against the size bounds, whatever made it (an
  // operator, a filter, a function).
  Value eval(const Expr& e) {
    Level level(*this);
    Value v = eval_unchecked(e);
    if (v.is_string()) {
      check_string_size(v.as_string().size());
    } else if (v.is_list()) {
      check_list_size(v.as_list().size());
    }
    return v;
  }

  Value eval_unchecked(const Expr& e) {
    line_ = e.line;
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.value;
      case Expr::Kind::kName:
        return lookup(e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        List items;
        for (const ExprPtr& item : e.items) items.push_back(eval(*item));
        return Value(std::move(items));
      }
      case Expr::Kind::kDict: {
        Dict dict;
        for (size_t i = 0; i < e.keys.size(); ++i) {
          const Value key = eval(*e.keys[i]);
          if (!key.is_string()) throw TemplateError("dict keys must be strings");
          Value value = eval(*e.items[i]);
          bool replaced = false;
          for (auto& [k, v] : dict) {
            if (k == key.as_string()) {
              v = value;
              replaced = true;
            }
          }
          if (!replaced) dict.emplace_back(key.as_string(), std::move(value));
        }
        return Value(std::move(dict));
      }
      case Expr::Kind::kAttribute:
        return get_attribute(eval(*e.object), e.name);
      case Expr::Kind::kSubscript: {
        const Value object = eval(*e.object);
        if (!e.slice) return get_item(object, eval(*e.items[0]));
        Value parts[3];
        for (size_t i = 0; i < 3; ++i) {
          if (e.items[i]) parts[i] = eval(*e.items[i]);
        }
        return get_slice(object, e.items[0] ? &parts[0] : nullptr, e.items[1] ? &parts[1] : nullptr,
                         e.items[2] ? &parts[2] : nullptr);
      }
      case Expr::Kind::kCall: {
        const Value callee = eval(*e.object);
        CallArgs args = eval_args(e);
        if (!callee.is_function()) {
          need_defined(callee);
          throw TemplateError(fmt::format("'{}' is not callable", callee.type_name()));
        }
        const int line = e.line;
        Value result = callee.as_function()(args);
        line_ = line;
        return result;
      }
      case Expr::Kind::kFilter: {
        const Value value = eval(*e.object);
        CallArgs args = eval_args(e);
        line_ = e.line;
        return apply_filter(e.name, value, args);
      }
      case Expr::Kind::kTest: {
        const Value value = eval(*e.object);
        CallArgs args = eval_args(e);
        line_ = e.line;
        return Value(apply_test(e.name, value, args) != e.negated);
      }
      case Expr::Kind::kUnary: {
        const Value v = eval(*e.object);
        if (e.name == "not") return Value(!v.truthy());
        need_defined(v);
        if (!v.is_number())
          throw TemplateError(fmt::format("bad operand type for unary {}: '{}'", e.name, v.type_name()));
        if (e.name == "+") return v.is_float() ? Value(v.as_double()) : Value(v.as_int());
        if (!v.is_float() && v.as_int() == INT64_MIN) overflow("-");
        return v.is_float() ? Value(-v.as_double()) : Value(-v.as_int());
      }
      case Expr::Kind::kBinary:
        return eval_binary(e);
      case Expr::Kind::kConditional:
        if (eval(*e.object).truthy()) return eval(*e.items[0]);
        return e.items[1] ? eval(*e.items[1]) : Value::undefined();
    }
    return Value();
  }

  Value eval_binary(const Expr& e) {
    const std::string& op = e.name;
    const Value left = eval(*e.object);
    if (op == "and") return left.truthy() ? eval(*e.right) : left;
    if (op == "or") return left.truthy() ? left : eval(*e.right);
    const Value right = eval(*e.right);
    line_ = e.line;
    if (op == "==") return Value(equal(left, right));
    if (op == "!=") return Value(!equal(left, right));
    if (op == "<") return Value(less(left, right));
    if (op == ">") return Value(less(right, left));
    if (op == "<=") return Value(!less(right, left));
    if (op == ">=") return Value(!less(left, right));
    if (op == "in" || op == "not in") {
      CallArgs args;
      args.positional.push_back(right);
      return Value(apply_test("in", left, args) == (op == "in"));
    }
    if (op == "~") {
      std::string joined = left.str();
      const std::string tail = right.str();
      check_string_size(joined.size() + tail.size());
      return Value(joined + tail);
    }
    return arithmetic(op, left, right);
  }

  const std::string& name_;
  std::unordered_map<std::string, Value> globals_;
  std::vector<Frame> frames_;
  std::vector<Value> namespaces_;  // made in this rendering
  int line_ = 0;
  int depth_ = 0;
  int64_t steps_ = 0;
  int64_t loop_iterations_ = 0;
};

}  // namespace

Template::Template(std::string_view source, std::string name)
    : name_(std::move(name)), body_(std::make_shared<const Body>(parse_template(source, name_))) {}

std::string Template::render(const Dict& variables) const {
  Renderer renderer(name_, variables);
  return renderer.render(*body_);
}

}  // namespace omni::text::jinja
