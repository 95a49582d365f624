// A parsed Jinja template and its renderer, for chat templates. Rendering is a pure function of
// the template and the variables: a Template may be rendered from many threads at once.
//
// Errors: the constructor throws omni::Error(kLoadFailed) "<name> line N: ..." for a syntax
// error; render() throws omni::Error(kInvalidArgument) "<name> line N: ..." when evaluation fails
// (an undefined value used, a type error) and raise_exception's message as it is.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "text/chat_template/template_ast.h"
#include "text/chat_template/template_value.h"

namespace omni::text::jinja {

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
