#include "text/chat_template/template_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "text/chat_template/template.h"
#include "text/chat_template/template_builtins.h"
#include "text/tokenizer/utf8.h"

namespace omni::text::jinja {
namespace {

struct Token {
  enum class Type { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };
  Type type;
  std::string text;
  int line;
};

bool is_python_space(char32_t cp) { return utf8::is_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F); }

// Removes trailing whitespace (Python's str.rstrip()).
void rstrip(std::string& s) {
  size_t end = s.size();
  while (end > 0) {
    size_t before = end;
    if (!is_python_space(utf8::previous_code_point(s, before))) break;
    end = before;
  }
  s.resize(end);
}

class Lexer {
 public:
  Lexer(std::string_view source, std::string_view name) : name_(name) {
    // Jinja normalizes newlines and drops one trailing newline (keep_trailing_newline=False).
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t tag = pos_;
      while (true) {
        tag = src_.find('{', tag);
        if (tag == std::string::npos || tag + 1 >= src_.size()) {
          tag = std::string::npos;
          break;
        }
        const char c = src_[tag + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++tag;
      }
      std::string text = src_.substr(pos_, tag == std::string::npos ? std::string::npos : tag - pos_);
      if (tag == std::string::npos) {
        emit_text(std::move(text));
        break;
      }
      const char kind = src_[tag + 1];
      const char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (modifier == '-') {
        rstrip(text);
      } else if (kind != '{' && modifier != '+') {
        // lstrip_blocks: a block or comment tag alone on its line takes the indentation with it.
        const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if (line_start > 0 || line_starting) {
          bool blank = line_start < text.size();
          for (size_t i = line_start; i < text.size() && blank;) {
            blank = is_python_space(utf8::next_code_point(text, i));
          }
          if (blank) text.resize(line_start);
        }
      }
      emit_text(std::move(text));
      line_ += count_lines(pos_, tag);
      pos_ = tag + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      bool strip_after = false;
      if (kind == '#') {
        const size_t end = src_.find("#}", pos_);
        if (end == std::string::npos) fail(line_, "unterminated comment");
        strip_after = end > pos_ && src_[end - 1] == '-';
        line_ += count_lines(pos_, end);
        pos_ = end + 2;
      } else {
        strip_after = lex_tag(kind);
      }
      if (strip_after) {
        while (pos_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos_]))) {
          if (src_[pos_] == '\n') ++line_;
          ++pos_;
        }
      } else if (kind != '{' && pos_ < src_.size() && src_[pos_] == '\n') {
        ++pos_;  // trim_blocks
        ++line_;
      }
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    tokens_.push_back({Token::Type::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw_error(ErrorCode::kLoadFailed, "{} line {}: {}", name_, line, what);
  }

  int count_lines(size_t from, size_t to) const {
    int n = 0;
    for (size_t i = from; i < to && i < src_.size(); ++i) n += src_[i] == '\n';
    return n;
  }

  void emit_text(std::string text) {
    if (!text.empty()) tokens_.push_back({Token::Type::kText, std::move(text), line_});
  }

  // Lexes the inside of {{ ... }} or {% ... %}; returns whether it ended with '-'.
  bool lex_tag(char kind) {
    const char close = kind == '{' ? '}' : '%';
    tokens_.push_back({kind == '{' ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "", line_});
    int depth = 0;
    while (true) {
      while (pos_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos_]))) {
        if (src_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= src_.size())
        fail(line_,
             kind == '{' ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'");
      if (depth == 0) {
        const bool minus =
            src_[pos_] == '-' && pos_ + 2 < src_.size() + 0 && src_[pos_ + 1] == close && src_[pos_ + 2] == '}';
        const bool plain = src_[pos_] == close && pos_ + 1 < src_.size() && src_[pos_ + 1] == '}';
        if (minus || plain) {
          pos_ += minus ? 3 : 2;
          tokens_.push_back({kind == '{' ? Token::Type::kVarEnd : Token::Type::kBlockEnd, "", line_});
          return minus;
        }
      }
      const char c = src_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = pos_;
        while (end < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) ++end;
        tokens_.push_back({Token::Type::kName, src_.substr(pos_, end - pos_), line_});
        pos_ = end;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                           ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|", "!"};
        std::string op;
        for (const char* candidate : kOps) {
          if (src_.compare(pos_, std::strlen(candidate), candidate) == 0) {
            op = candidate;
            break;
          }
        }
        if (op.empty() || op == "!") fail(line_, fmt::format("unexpected character '{}'", c));
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        tokens_.push_back({Token::Type::kOp, op, line_});
        pos_ += op.size();
      }
    }
  }

  void lex_number() {
    size_t end = pos_;
    bool is_float = false;
    while (end < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) ++end;
    if (end + 1 < src_.size() && src_[end] == '.' && std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      is_float = true;
      ++end;
      while (end < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) ++end;
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
        is_float = true;
        end = e;
        while (end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]))) ++end;
      }
    }
    std::string text;
    for (size_t i = pos_; i < end; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    tokens_.push_back({is_float ? Token::Type::kFloat : Token::Type::kInt, text, line_});
    pos_ = end;
  }

  void lex_string(char quote) {
    // Python string-literal escapes (jinja decodes literals with "unicode-escape").
    std::string out;
    size_t p = pos_ + 1;
    const int start_line = line_;
    while (true) {
      if (p >= src_.size()) fail(start_line, "unterminated string literal");
      const char c = src_[p];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\' || p + 1 >= src_.size()) {
        out += c;
        ++p;
        continue;
      }
      const char e = src_[p + 1];
      p += 2;
      // \xXX, \uXXXX, \UXXXXXXXX: exactly n hex digits, as Python's literal parser demands.
      auto hex = [&](size_t n) {
        char32_t cp = 0;
        for (size_t i = 0; i < n; ++i) {
          const char h = p + i < src_.size() ? src_[p + i] : '\0';
          const int digit = h >= '0' && h <= '9'   ? h - '0'
                            : h >= 'a' && h <= 'f' ? h - 'a' + 10
                            : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                   : -1;
          if (digit < 0) {
            fail(line_, fmt::format("truncated \\{} escape in string literal: it needs {} hex digits", e, n));
          }
          cp = cp * 16 + static_cast<char32_t>(digit);
        }
        if (cp > 0x10FFFF) fail(line_, fmt::format("\\{} escape in string literal is beyond U+10FFFF", e));
        p += n;
        utf8::append_code_point(cp, out);
      };
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case '\n':
          ++line_;
          break;  // a line continuation
        case 'x':
          hex(2);
          break;
        case 'u':
          hex(4);
          break;
        case 'U':
          hex(8);
          break;
        default:
          if (e >= '0' && e <= '7') {
            size_t n = 1;
            while (n < 3 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7') {
              ++p;
              ++n;
            }
            char32_t cp = 0;
            for (size_t i = p - n; i < p; ++i) cp = cp * 8 + static_cast<char32_t>(src_[i] - '0');
            utf8::append_code_point(cp, out);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    tokens_.push_back({Token::Type::kString, out, start_line});
    pos_ = p + 1;
  }

  std::string src_;
  std::string_view name_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string_view name) : tokens_(std::move(tokens)), name_(name) {}

  Body parse_all() {
    Body body = parse_body({});
    if (peek().type != Token::Type::kEof) fail(peek().line, "unexpected tag");
    return body;
  }

 private:
  using T = Token::Type;

  [[noreturn]] void fail(int line, const std::string& what) const {
    throw_error(ErrorCode::kLoadFailed, "{} line {}: {}", name_, line, what);
  }

  // One level of the parser's recursion (a block in a block, a parenthesis, a unary operator),
  // bounded by kMaxNesting.
  class Nest {
   public:
    explicit Nest(Parser& parser) : parser_(parser) {
      if (++parser_.nesting_ > kMaxNesting) {
        parser_.fail(parser_.peek().line, fmt::format("blocks or expressions nested deeper than {}", kMaxNesting));
      }
    }
    ~Nest() { --parser_.nesting_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    Parser& parser_;
  };

  int64_t integer_literal(const Token& t) const {
    int64_t value = 0;
    const char* end = t.text.data() + t.text.size();
    auto [ptr, ec] = std::from_chars(t.text.data(), end, value);
    if (ec != std::errc() || ptr != end)
      fail(t.line, fmt::format("integer literal {} does not fit in 64 bits", t.text));
    return value;
  }

  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  const Token& next() { return tokens_[std::min(pos_++, tokens_.size() - 1)]; }
  bool at_op(std::string_view op) const { return peek().type == T::kOp && peek().text == op; }
  bool at_name(std::string_view name) const { return peek().type == T::kName && peek().text == name; }
  void expect_op(std::string_view op) {
    if (!at_op(op)) fail(peek().line, fmt::format("expected '{}', got {}", op, describe(peek())));
    ++pos_;
  }
  void expect_block_end() {
    if (peek().type != T::kBlockEnd)
      fail(peek().line, fmt::format("expected end of tag '%}}', got {}", describe(peek())));
    ++pos_;
  }
  std::string expect_name() {
    if (peek().type != T::kName) fail(peek().line, fmt::format("expected a name, got {}", describe(peek())));
    return next().text;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case T::kEof:
        return "end of template";
      case T::kBlockEnd:
        return "'%}'";
      case T::kVarEnd:
        return "'}}'";
      case T::kString:
        return "a string";
      default:
        return "'" + t.text + "'";
    }
  }

  // Parses nodes until a block tag whose keyword is in `stop` (left unconsumed: the
  // {% and the keyword are the next tokens) or the end of the template.
  Body parse_body(const std::vector<std::string_view>& stop) {
    Nest nest(*this);
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.type == T::kEof) {
        if (!stop.empty()) fail(t.line, fmt::format("unexpected end of template, expected '{}'", stop.back()));
        return body;
      }
      if (t.type == T::kText) {
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kText;
        node->line = t.line;
        node->text = next().text;
        body.push_back(std::move(node));
      } else if (t.type == T::kVarBegin) {
        ++pos_;
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kOutput;
        node->line = t.line;
        node->expr = parse_expression();
        if (peek().type != T::kVarEnd) fail(peek().line, fmt::format("expected '}}}}', got {}", describe(peek())));
        ++pos_;
        body.push_back(std::move(node));
      } else if (t.type == T::kBlockBegin) {
        const Token& keyword = peek(1);
        if (keyword.type != T::kName) fail(keyword.line, "expected a tag name after '{%'");
        for (std::string_view s : stop) {
          if (keyword.text == s) return body;
        }
        pos_ += 2;
        body.push_back(parse_statement(keyword));
      } else {
        fail(t.line, "unexpected " + describe(t));
      }
    }
  }

  // Consumes "{% keyword" (the caller checked it is there).
  void consume_tag(std::string_view keyword) {
    if (peek().type != T::kBlockBegin || !(peek(1).type == T::kName && peek(1).text == keyword)) {
      fail(peek().line, fmt::format("expected '{{% {} %}}'", keyword));
    }
    pos_ += 2;
  }

  NodePtr parse_statement(const Token& keyword) {
    auto node = std::make_unique<Node>();
    node->line = keyword.line;
    const std::string& k = keyword.text;
    if (k == "if") {
      node->kind = Node::Kind::kIf;
      ExprPtr condition = parse_expression();
      expect_block_end();
      Body body = parse_body({"elif", "else", "endif"});
      node->branches.emplace_back(std::move(condition), std::move(body));
      while (true) {
        const std::string tag = peek(1).text;
        pos_ += 2;
        if (tag == "elif") {
          ExprPtr c = parse_expression();
          expect_block_end();
          Body b = parse_body({"elif", "else", "endif"});
          node->branches.emplace_back(std::move(c), std::move(b));
        } else if (tag == "else") {
          expect_block_end();
          node->else_body = parse_body({"endif"});
          consume_tag("endif");
          expect_block_end();
          break;
        } else {
          expect_block_end();
          break;
        }
      }
      return node;
    }
    if (k == "for") {
      node->kind = Node::Kind::kFor;
      node->targets.push_back(expect_name());
      while (at_op(",")) {
        ++pos_;
        node->targets.push_back(expect_name());
      }
      if (!at_name("in")) fail(peek().line, "expected 'in' in for loop");
      ++pos_;
      node->expr = parse_or();  // not a conditional: 'if' filters the loop
      if (at_name("if")) {
        ++pos_;
        node->condition = parse_or();
      }
      if (at_name("recursive")) fail(peek().line, "recursive loops are not supported");
      expect_block_end();
      node->body = parse_body({"else", "endfor"});
      if (peek(1).text == "else") {
        pos_ += 2;
        expect_block_end();
        node->else_body = parse_body({"endfor"});
      }
      consume_tag("endfor");
      expect_block_end();
      return node;
    }
    if (k == "set") {
      node->kind = Node::Kind::kSet;
      const std::string first = expect_name();
      if (at_op(".")) {
        ++pos_;
        node->attribute = expect_name();
      }
      node->targets.push_back(first);
      while (at_op(",")) {
        ++pos_;
        node->targets.push_back(expect_name());
      }
      if (at_op("=")) {
        ++pos_;
        node->expr = parse_tuple_or_expression();
        expect_block_end();
        return node;
      }
      // A block set captures its body's output, optionally through filters.
      while (at_op("|")) {
        ++pos_;
        node->filters.push_back(expect_name());
        if (!is_known_filter(node->filters.back()))
          fail(node->line, fmt::format("no filter named '{}'", node->filters.back()));
      }
      expect_block_end();
      node->body = parse_body({"endset"});
      consume_tag("endset");
      expect_block_end();
      return node;
    }
    if (k == "macro") {
      node->kind = Node::Kind::kMacro;
      node->name = expect_name();
      expect_op("(");
      while (!at_op(")")) {
        std::string param = expect_name();
        ExprPtr default_value;
        if (at_op("=")) {
          ++pos_;
          default_value = parse_expression();
        }
        node->params.emplace_back(std::move(param), std::move(default_value));
        if (!at_op(")")) expect_op(",");
      }
      ++pos_;
      expect_block_end();
      node->body = parse_body({"endmacro"});
      consume_tag("endmacro");
      if (peek().type == T::kName) ++pos_;  // {% endmacro name %}
      expect_block_end();
      return node;
    }
    if (k == "break" || k == "continue") {
      node->kind = k == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      expect_block_end();
      return node;
    }
    if (k == "generation") {
      // transformers' AssistantTracker extension: marks assistant text, renders it unchanged.
      node->kind = Node::Kind::kCallBlock;
      expect_block_end();
      node->body = parse_body({"endgeneration"});
      consume_tag("endgeneration");
      expect_block_end();
      return node;
    }
    fail(keyword.line, fmt::format("unknown tag '{}'", k));
  }

  ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  ExprPtr parse_tuple_or_expression() {
    const int line = peek().line;
    ExprPtr first = parse_expression();
    if (!at_op(",")) return first;
    auto tuple = make(Expr::Kind::kTuple, line);
    tuple->items.push_back(std::move(first));
    while (at_op(",")) {
      ++pos_;
      if (peek().type == T::kBlockEnd || peek().type == T::kVarEnd) break;
      tuple->items.push_back(parse_expression());
    }
    return tuple;
  }

  ExprPtr parse_expression() {
    Nest nest(*this);
    ExprPtr value = parse_or();
    while (at_name("if")) {
      const int line = next().line;
      auto cond = make(Expr::Kind::kConditional, line);
      cond->object = parse_or();
      cond->items.push_back(std::move(value));
      if (at_name("else")) {
        ++pos_;
        cond->items.push_back(parse_expression());
      } else {
        cond->items.push_back(nullptr);
      }
      value = std::move(cond);
    }
    return value;
  }

  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, int line) {
    auto e = make(Expr::Kind::kBinary, line);
    e->name = std::move(op);
    e->object = std::move(left);
    e->right = std::move(right);
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (at_name("or")) {
      const int line = next().line;
      left = binary("or", std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (at_name("and")) {
      const int line = next().line;
      left = binary("and", std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    Nest nest(*this);
    if (at_name("not")) {
      const int line = next().line;
      auto e = make(Expr::Kind::kUnary, line);
      e->name = "not";
      e->object = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    while (true) {
      const int line = peek().line;
      std::string op;
      if (peek().type == T::kOp && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                    peek().text == ">" || peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (at_name("in")) {
        ++pos_;
        op = "in";
      } else if (at_name("not") && peek(1).type == T::kName && peek(1).text == "in") {
        pos_ += 2;
        op = "not in";
      } else {
        return left;
      }
      left = binary(op, std::move(left), parse_math1(), line);
    }
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (at_op("+") || at_op("-")) {
      const Token& t = next();
      left = binary(t.text, std::move(left), parse_concat(), t.line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (at_op("~")) {
      const int line = next().line;
      left = binary("~", std::move(left), parse_math2(), line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& t = next();
      left = binary(t.text, std::move(left), parse_pow(), t.line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (at_op("**")) {
      const int line = next().line;
      left = binary("**", std::move(left), parse_unary(true), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    Nest nest(*this);
    ExprPtr node;
    if (at_op("-") || at_op("+")) {
      const Token& t = next();
      node = make(Expr::Kind::kUnary, t.line);
      node->name = t.text;
      node->object = parse_unary(false);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = next();
    switch (t.type) {
      case T::kName: {
        if (t.text == "true" || t.text == "True") return literal(Value(true), t.line);
        if (t.text == "false" || t.text == "False") return literal(Value(false), t.line);
        if (t.text == "none" || t.text == "None") return literal(Value::none(), t.line);
        auto e = make(Expr::Kind::kName, t.line);
        e->name = t.text;
        return e;
      }
      case T::kString: {
        std::string s = t.text;
        while (peek().type == T::kString) s += next().text;  // adjacent literals concatenate
        return literal(Value(std::move(s)), t.line);
      }
      case T::kInt:
        return literal(Value(integer_literal(t)), t.line);
      case T::kFloat:
        return literal(Value(std::strtod(t.text.c_str(), nullptr)), t.line);
      case T::kOp:
        if (t.text == "(") {
          if (at_op(")")) {
            ++pos_;
            return make(Expr::Kind::kTuple, t.line);
          }
          ExprPtr inner = parse_expression();
          if (at_op(",")) {
            auto tuple = make(Expr::Kind::kTuple, t.line);
            tuple->items.push_back(std::move(inner));
            while (at_op(",")) {
              ++pos_;
              if (at_op(")")) break;
              tuple->items.push_back(parse_expression());
            }
            inner = std::move(tuple);
          }
          expect_op(")");
          return inner;
        }
        if (t.text == "[") {
          auto list = make(Expr::Kind::kList, t.line);
          while (!at_op("]")) {
            list->items.push_back(parse_expression());
            if (!at_op("]")) expect_op(",");
          }
          ++pos_;
          return list;
        }
        if (t.text == "{") {
          auto dict = make(Expr::Kind::kDict, t.line);
          while (!at_op("}")) {
            dict->keys.push_back(parse_expression());
            expect_op(":");
            dict->items.push_back(parse_expression());
            if (!at_op("}")) expect_op(",");
          }
          ++pos_;
          return dict;
        }
        break;
      default:
        break;
    }
    fail(t.line, "unexpected " + describe(t));
  }

  ExprPtr literal(Value v, int line) {
    auto e = make(Expr::Kind::kLiteral, line);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (at_op(".")) {
        const int line = next().line;
        auto e = make(Expr::Kind::kAttribute, line);
        if (peek().type == T::kInt) {
          // foo.0 is an item lookup.
          e->kind = Expr::Kind::kSubscript;
          e->items.push_back(literal(Value(integer_literal(next())), line));
        } else {
          e->name = expect_name();
        }
        e->object = std::move(node);
        node = std::move(e);
      } else if (at_op("[")) {
        const int line = next().line;
        auto e = make(Expr::Kind::kSubscript, line);
        e->object = std::move(node);
        ExprPtr parts[3];
        int part = 0;
        while (!at_op("]")) {
          if (at_op(":")) {
            ++pos_;
            e->slice = true;
            if (++part > 2) fail(line, "too many ':' in slice");
            continue;
          }
          if (parts[part]) fail(line, "expected ':' or ']' in subscript");
          parts[part] = parse_expression();
        }
        ++pos_;
        if (!e->slice && !parts[0]) fail(line, "empty subscript");
        for (auto& p : parts) e->items.push_back(std::move(p));
        if (!e->slice) e->items.resize(1);
        node = std::move(e);
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  void parse_args(Expr& e) {
    expect_op("(");
    while (!at_op(")")) {
      if (peek().type == T::kName && peek(1).type == T::kOp && peek(1).text == "=") {
        std::string key = next().text;
        ++pos_;
        e.keyword_args.emplace_back(std::move(key), parse_expression());
      } else {
        if (!e.keyword_args.empty()) fail(peek().line, "positional argument after keyword argument");
        e.items.push_back(parse_expression());
      }
      if (!at_op(")")) expect_op(",");
    }
    ++pos_;
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(Expr::Kind::kCall, peek().line);
    e->object = std::move(callee);
    parse_args(*e);
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (at_op("|")) {
        const int line = next().line;
        auto e = make(Expr::Kind::kFilter, line);
        e->name = expect_name();
        while (at_op(".")) {  // dotted filter names
          ++pos_;
          e->name += "." + expect_name();
        }
        if (!is_known_filter(e->name)) fail(line, fmt::format("no filter named '{}'", e->name));
        e->object = std::move(node);
        if (at_op("(")) parse_args(*e);
        node = std::move(e);
      } else if (at_name("is")) {
        const int line = next().line;
        auto e = make(Expr::Kind::kTest, line);
        if (at_name("not")) {
          ++pos_;
          e->negated = true;
        }
        e->name = expect_name();
        if (!is_known_test(e->name)) fail(line, fmt::format("no test named '{}'", e->name));
        e->object = std::move(node);
        if (at_op("(")) {
          parse_args(*e);
        } else if (starts_test_argument()) {
          e->items.push_back(parse_primary());
          e->items.back() = parse_postfix(std::move(e->items.back()));
        }
        node = std::move(e);
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  bool starts_test_argument() const {
    const Token& t = peek();
    if (t.type == T::kString || t.type == T::kInt || t.type == T::kFloat) return true;
    if (t.type == T::kName) {
      static const char* const kStop[] = {"else", "or", "and", "if", "in", "is", "not"};
      for (const char* s : kStop) {
        if (t.text == s) return false;
      }
      return true;
    }
    return t.type == T::kOp && (t.text == "[" || t.text == "{");
  }

  std::vector<Token> tokens_;
  std::string_view name_;
  size_t pos_ = 0;
  int nesting_ = 0;
};

}  // namespace

Expr::~Expr() {
  std::vector<ExprPtr> pending;
  auto detach = [&pending](Expr& e) {
    if (e.object) pending.push_back(std::move(e.object));
    if (e.right) pending.push_back(std::move(e.right));
    for (ExprPtr& item : e.items) {
      if (item) pending.push_back(std::move(item));
    }
    for (ExprPtr& key : e.keys) {
      if (key) pending.push_back(std::move(key));
    }
    for (auto& [name, arg] : e.keyword_args) {
      if (arg) pending.push_back(std::move(arg));
    }
  };
  detach(*this);
  while (!pending.empty()) {
    ExprPtr e = std::move(pending.back());
    pending.pop_back();
    detach(*e);  // e is freed childless at the end of this iteration
  }
}

Body parse_template(std::string_view source, std::string_view source_name) {
  // The lexer and the string filters walk code points, which needs valid UTF-8.
  if (const std::optional<size_t> bad = utf8::find_invalid(source)) {
    const auto line = 1 + std::count(source.begin(), source.begin() + static_cast<std::ptrdiff_t>(*bad), '\n');
    throw_error(ErrorCode::kLoadFailed, "{} line {}: the template is not valid UTF-8 (byte {})", source_name, line,
                *bad);
  }
  Lexer lexer(source, source_name);
  Parser parser(lexer.run(), source_name);
  return parser.parse_all();
}

}  // namespace omni::text::jinja
