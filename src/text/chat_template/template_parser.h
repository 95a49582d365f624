// Lexer and parser for the Jinja subset chat templates use, with the environment transformers
// renders them in: trim_blocks and lstrip_blocks on, a single trailing newline dropped,
// whitespace control with {%- -%} {{- -}} {#- -#} and {%+.
//
// Errors: omni::Error(kLoadFailed) "<source> line N: <what>" for a syntax error, an unknown
// tag, filter or test.
#pragma once

#include <string_view>

#include "text/chat_template/template_ast.h"

namespace omni::text::jinja {

// Parses `source`; `source_name` (e.g. "tokenizer_config.json chat_template") prefixes errors.
Body parse_template(std::string_view source, std::string_view source_name);

}  // namespace omni::text::jinja
