// The syntax tree of a parsed chat template. Nodes are immutable after parsing and carry the
// template line they came from, for error messages.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/chat_template/template_value.h"

namespace omni::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  Expr() = default;
  Expr(const Expr&) = delete;
  Expr& operator=(const Expr&) = delete;
  // Frees the subtree without recursion: a chain such as 1+1+1+… is a tree as deep as it is
  // long, and the template it came from may be rejected for that depth.
  ~Expr();

  enum class Kind {
    kLiteral,     // value
    kName,        // name
    kList,        // items
    kTuple,       // items (a tuple is a list here)
    kDict,        // keys[i]: items[i]
    kAttribute,   // object.name
    kSubscript,   // object[index] or object[start:stop:step] (slice: any of items may be null)
    kCall,        // object(args, keyword args)
    kFilter,      // object | name(args)
    kTest,        // object is [not] name(args)
    kUnary,       // op object  (op: "not", "-", "+")
    kBinary,      // object op right
    kConditional  // items[0] if object else items[1] (items[1] may be null)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;  // name, attribute, filter, test, operator
  ExprPtr object;
  ExprPtr right;
  std::vector<ExprPtr> items;
  std::vector<ExprPtr> keys;
  std::vector<std::pair<std::string, ExprPtr>> keyword_args;
  bool negated = false;  // is not
  bool slice = false;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,    // text
    kOutput,  // {{ expr }}
    kIf,      // branches: (condition, body)...; else_body
    kFor,     // targets in expr [if condition]: body [else else_body]
    kSet,     // targets (or namespace attribute) = expr, or block set: body
    kMacro,   // name(params with defaults): body
    kBreak,
    kContinue,
    kCallBlock  // a body rendered as is ({% generation %})
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;  // loop / set variable names
  std::string attribute;             // {% set ns.attribute = ... %}
  std::string name;                  // macro name
  std::vector<std::pair<std::string, ExprPtr>> params;
  std::vector<std::string> filters;  // block set filters
};

}  // namespace omni::text::jinja
