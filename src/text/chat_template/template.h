// A parsed Jinja template and its renderer, for chat templates. Rendering is a pure function of
// the template and the variables: a Template may be rendered from many threads at once.
//
// Errors: the constructor throws omni::Error(kLoadFailed) "<name> line N: ..." for a syntax
// error; render() throws omni::Error(kInvalidArgument) "<name> line N: ..." when evaluation fails
// (an undefined value used, a type error) and raise_exception's message as it is.
//
// Bounds: a template comes from a checkpoint's files, which are as untrusted as a request, so
// parsing and rendering are bounded, each bound an error naming the line and the limit: blocks
// and expressions nested deeper than kMaxNesting; evaluation (macro calls included) deeper than
// kMaxEvalDepth; more than kMaxRenderSteps nodes and expressions evaluated, or more than
// kMaxLoopIterations loop iterations, in one rendering (huge or nested loops); a string (the
// output included) over kMaxStringBytes, a list over kMaxListItems; integer arithmetic that
// overflows 64 bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "text/chat_template/template_ast.h"
#include "text/chat_template/template_value.h"

namespace omni::text::jinja {

inline constexpr int kMaxNesting = 256;
inline constexpr int kMaxEvalDepth = 1024;
inline constexpr int64_t kMaxRenderSteps = 2'000'000;
inline constexpr int64_t kMaxLoopIterations = 200'000;
inline constexpr size_t kMaxStringBytes = size_t{64} << 20;
inline constexpr size_t kMaxListItems = size_t{1} << 20;

class Template {
 public:
  Template(std::string_view source, std::string name);

  // Renders with `variables` as the template's globals (besides range, namespace, dict,
  // raise_exception and strftime_now).
  std::string render(const Dict& variables) const;

  const std::string& name() const { return name_; }
  // The parsed template, for inspections such as detect_content_format().
  const Body& body() const { return *body_; }

 private:
  std::string name_;
  std::shared_ptr<const Body> body_;
};

}  // namespace omni::text::jinja
